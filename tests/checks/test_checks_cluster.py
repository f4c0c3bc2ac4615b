"""Server-side checks across three real nodes: each instance is checked by one node, its
verdict reaches the other two (DOWN everywhere, then UP everywhere), when the node that
checks an instance is killed another takes its check over, and a node started again empty
copies the holds with the instances, so the checks it now runs release them. An admin's check
on an application reaches every node, a node started empty too, and so does its removal."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.checks.conftest import Target, served_at
from tests.helpers import eventually
from tests.nodes import Node

pytestmark = pytest.mark.slow

INSTANCES = [f"i-{n}" for n in range(12)]  # some are the restarted node's to check
SETTINGS = {
    "checks__loopback": "true",
    "checks__min_interval": "1",
    "checks__failures": 2,
    "checks__successes": 1,
    "peers__probe_interval": 0.5,
}


def doc(iid: str, port: int) -> dict[str, Any]:
    return served_at(iid, port, **{"registry.check": "http", "registry.check.interval": "1"})


async def checks(node: Node, iid: str) -> dict[str, Any] | None:
    status, explained = await node.call("GET", f"apps/ORDERS/{iid}/status/explain")
    assert 200 == status, explained
    return explained["healthCheck"]  # type: ignore[no-any-return]


async def checkers(nodes: list[Node], iid: str) -> list[int]:
    """The ports of the nodes that check `iid` (by their own account)."""
    return [n.port for n in nodes if (await checks(n, iid) or {}).get("checkedHere")]


async def statuses(nodes: list[Node], iid: str) -> set[str]:
    return {(await n.instance("ORDERS", iid) or {}).get("status", "gone") for n in nodes}


async def test_one_checker_per_instance_verdicts_everywhere_and_a_takeover(
    nodes, target: tuple[Target, TestServer]
):
    service, server = target
    cluster = await nodes.cluster(3, **SETTINGS)
    for n, iid in enumerate(INSTANCES):
        status, answer = await cluster[n % 3].call(
            "POST", "apps/ORDERS", body={"instance": doc(iid, server.port)}
        )
        assert 204 == status, answer
    for iid in INSTANCES:  # once the nodes know each other, one checks each instance
        await eventually(lambda iid=iid: checkers(cluster, iid), lambda found: len(found) == 1)
    owners = {iid: (await checkers(cluster, iid))[0] for iid in INSTANCES}
    assert len(set(owners.values())) > 1  # shared out, not all on one node

    service.status = 503  # every instance fails: DOWN on every node
    for iid in INSTANCES:
        await eventually(lambda iid=iid: statuses(cluster, iid), lambda s: s == {"DOWN"})
    service.status = 200
    for iid in INSTANCES:
        await eventually(lambda iid=iid: statuses(cluster, iid), lambda s: s == {"UP"})

    # The node that checks i-0 dies: one of the others takes its check over, and its verdict
    # still reaches the survivor.
    dead = next(n for n in cluster if n.port == owners["i-0"])
    await dead.kill()
    alive = [n for n in cluster if n is not dead]
    await eventually(lambda: checkers(alive, "i-0"), lambda found: len(found) == 1)
    service.status = 503
    for iid in INSTANCES:
        await eventually(lambda iid=iid: statuses(alive, iid), lambda s: s == {"DOWN"})

    # It comes back empty (these nodes keep no store): it copies the instances and their
    # holds, takes its share of the checks, and releases what it checks when they pass.
    await dead.start()
    for iid in INSTANCES:
        await eventually(lambda iid=iid: checkers(cluster, iid), lambda found: len(found) == 1)
    assert [dead.port] in [await checkers(cluster, iid) for iid in INSTANCES]
    service.status = 200
    for iid in INSTANCES:
        await eventually(lambda iid=iid: statuses(cluster, iid), lambda s: s == {"UP"})


async def test_an_admins_check_reaches_every_node_and_a_node_started_empty(
    nodes, target: tuple[Target, TestServer]
):
    """Set on one node, run by one node per instance (instances that ask for none), its
    verdicts everywhere; a node started again empty copies it from its peers; removed on
    another node, it is gone everywhere and its holds are released everywhere."""
    service, server = target
    cluster = await nodes.cluster(3, **SETTINGS)
    unasked = [f"u-{n}" for n in range(6)]
    for n, iid in enumerate(unasked):
        status, answer = await cluster[n % 3].call(
            "POST", "apps/ORDERS", body={"instance": served_at(iid, server.port)}
        )
        assert 204 == status, answer
    status, answer = await cluster[0].call(
        "PUT", "checks/ORDERS", body={"check": "http", "interval": 1}
    )
    assert 200 == status, answer
    for node in cluster:
        await eventually(lambda node=node: node.call("GET", "checks/ORDERS"), lambda r: r[0] == 200)
    for iid in unasked:
        await eventually(lambda iid=iid: checkers(cluster, iid), lambda found: len(found) == 1)
    service.status = 503
    for iid in unasked:
        await eventually(lambda iid=iid: statuses(cluster, iid), lambda s: s == {"DOWN"})

    await cluster[2].kill()
    await cluster[2].start()  # no store: what it knows, it copies from its peers
    await eventually(cluster[2].serving_reads)
    status, answer = await cluster[2].call("GET", "checks/ORDERS")
    assert (200, "http") == (status, answer["check"]["check"])

    status, _ = await cluster[1].call("DELETE", "checks/ORDERS")
    assert 200 == status
    for node in cluster:
        await eventually(lambda node=node: node.call("GET", "checks/ORDERS"), lambda r: r[0] == 404)
    for iid in unasked:  # nothing checks them now: released on every node, though failing
        await eventually(lambda iid=iid: statuses(cluster, iid), lambda s: s == {"UP"})
