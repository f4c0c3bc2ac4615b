"""Cancels while a node is down, and a node killed right after a cancel: real processes.

Three peered nodes, each with its own store, hold 300 instances (each registered on "its"
node). One node is SIGKILLed; while it is down the others cancel instances of every node's,
keeping only the last few changes for it (`replication_max_pending`, as a busy cluster's
queues overflow during an outage), so that most cancels can reach it only by anti-entropy.
It starts again from its store. Then:

- no instance cancelled while it was down is listed by a surviving node at any moment after
  its return, nor by it once it has agreed with them (its first anti-entropy round runs at
  once);
- a cancel it answered 200 just before it was killed (its replication held back, so that
  the cancel had not left it) is never listed by it after the restart, and the other nodes
  drop the instance once it is back;
- all three then list the same instances: the 300 less every cancel.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.helpers import eventually, free_ports, instance_doc
from tests.nodes import Node, Nodes

pytestmark = pytest.mark.slow

COUNT = 300
AGREED_POLLS = 20  # looks at the three nodes, all agreeing, before the watch ends


async def listed(node: Node) -> frozenset[str]:
    status, answer = await node.call("GET", "apps/ORDERS")
    if status == 404:
        return frozenset()
    assert 200 == status, answer
    return frozenset(i["instanceId"] for i in answer["application"]["instance"])


async def register(node: Node, iid: str) -> None:
    doc = instance_doc("ORDERS", iid, leaseInfo={"renewalIntervalInSecs": 30, "durationInSecs": 90})
    status, answer = await node.call("POST", "apps/ORDERS", body={"instance": doc})
    assert 204 == status, answer


async def cancel(node: Node, iid: str) -> None:
    status, answer = await node.call("DELETE", f"apps/ORDERS/{iid}")
    assert 200 == status, answer


async def test_no_cancel_is_undone_by_a_restart(nodes: Nodes, tmp_path: Path) -> None:
    ports = free_ports(3)
    # Watched closely: no fetch limit (the test reads every node many times a second).
    stores = {
        port: {
            "store__enabled": "true",
            "store__data_dir": str(tmp_path / str(port)),
            "limits__fetch_rate_limit": 0,
        }
        for port in ports
    }
    # C holds its changes back for a while, so that what it cancels has surely not left it
    # when it is killed.
    survivors = {"peers__max_pending": 5}
    held_back = {ports[2]: {"peers__change_delay": 30}}
    cluster = a, b, c = await asyncio.gather(
        *(
            nodes.start(port, ports, **stores[port], **held_back.get(port, survivors))
            for port in ports
        )
    )
    for node in cluster:
        await eventually(node.serving_reads, timeout=20)
    ids = [f"i-{k}" for k in range(COUNT)]
    await asyncio.gather(*(register(cluster[k % 3], iid) for k, iid in enumerate(ids)))
    c_last = [iid for k, iid in enumerate(ids) if k % 3 == 2][:5]
    for node in cluster:
        await eventually(lambda n=node: listed(n), lambda s: len(s) == COUNT, what="copied")
    # C's store holds every instance: a restart from it could bring back any of them.
    await eventually(c.status, lambda s: s["store"]["pending"] == 0, what="written")

    for iid in c_last:  # answered 200, then killed before replicating
        await cancel(c, iid)
    await c.kill()
    while_down = [iid for k, iid in enumerate(ids) if k % 10 == 1]  # of every node's
    for k, iid in enumerate(while_down):
        await cancel((a, b)[k % 2], iid)

    await c.start()
    expected = frozenset(ids) - set(while_down) - set(c_last)
    seen: dict[str, set[str]] = {"a": set(), "b": set(), "c": set()}
    agreed = 0  # polls in a row at which all three listed what is expected

    async def watched() -> int:
        """One look at every node, recording any cancelled instance listed where it must
        not be: anywhere for the cancels made while C was down, except on C itself until
        its first anti-entropy round has run (once it agrees); on C for its own."""
        nonlocal agreed
        views = {name: await listed(node) for name, node in zip("abc", cluster, strict=True)}
        for name in "ab":
            seen[name] |= views[name] & set(while_down)
        seen["c"] |= views["c"] & set(c_last)
        if agreed:
            seen["c"] |= views["c"] & set(while_down)
        agreed = agreed + 1 if all(view == expected for view in views.values()) else 0
        return agreed

    # Until all three have agreed for AGREED_POLLS polls in a row, within 5 s of the return.
    await eventually(watched, lambda n: n >= AGREED_POLLS, timeout=5, what="agreement")
    assert {"a": set(), "b": set(), "c": set()} == seen, "cancelled instances came back"
