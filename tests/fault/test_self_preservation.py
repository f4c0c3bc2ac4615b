"""Half of the heartbeats stop at once, as when a network failure cuts off half the clients: a
real server process holds eviction by self-preservation and says why, and evicts nothing,
though the silent half's leases run out.

Eureka's timeline a tenth as long, so that it takes seconds: the server counts renewals over a
6 s window instead of its minute (`renewal_window`), clients renew every 3 s instead of 30 and
hold leases of 12 s instead of 120, and sweeps run every second.

A control server with self-preservation off runs beside it, on the same timeline and
heartbeats: it evicts the silent half, so the test fails if eviction never ran at all.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import aiohttp
import orjson
import pytest

from tests.helpers import eventually, instance_doc

pytestmark = pytest.mark.slow

WINDOW = 6  # seconds the server counts renewals over
# Two renewals a window each, as stock clients send two a minute; a lease that outlives the
# window, so the count shows the drop before the first silent lease runs out.
LEASE = {"renewalIntervalInSecs": 3, "durationInSecs": 12}
SWEEP = 1  # eviction_interval
INSTANCES = [f"i-{n}" for n in range(20)]
JSON = {"Accept": "application/json"}


async def test_half_the_heartbeats_stopping_holds_eviction_and_says_why(servers):
    """Beside it, a control server with self-preservation off on the same timeline evicts the
    silent half: the sweep runs, so the held server's verdict is what kept its leases."""
    held_server, control = await asyncio.gather(
        *(
            servers.start(
                store__enabled="false",
                limits__fetch_rate_limit=0,
                self_preservation__renewal_window=WINDOW,
                leases__eviction_interval=SWEEP,
                self_preservation__enabled=on,
            )
            for on in ("true", "false")
        )
    )
    bases, interval = [held_server.base, control.base], LEASE["renewalIntervalInSecs"]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        started = time.monotonic()
        for base in bases:
            for iid in INSTANCES:
                doc = {"instance": instance_doc("ORDERS", iid, leaseInfo=LEASE)}
                async with session.post(base + "/eureka/apps/ORDERS", json=doc) as response:
                    assert 204 == response.status
        beating = list(INSTANCES)

        async def heartbeats() -> None:  # at the clients' pace: the scenario runs in real time
            while True:
                await asyncio.sleep(interval)
                for base in bases:
                    for iid in list(beating):
                        async with session.put(f"{base}/eureka/apps/ORDERS/{iid}") as response:
                            assert 200 == response.status

        renewing = asyncio.ensure_future(heartbeats())
        try:
            await asyncio.sleep(1.5 * interval - (time.monotonic() - started))
            del beating[len(beating) // 2 :]  # half of them fall silent at once
            # Past the silent leases' end (their last renewal, one interval in, and a lease),
            # and a few sweeps.
            end = interval + LEASE["durationInSecs"] + 3 * SWEEP
            await asyncio.sleep(end - (time.monotonic() - started))
            held, evicted, listed = await _seen(session, held_server.base)
            # The control evicts the silent half (at most 15 % of its registry a sweep) and
            # keeps the others, which go on renewing.
            _, control_evicted, _ = await eventually(
                lambda: _seen(session, control.base),
                lambda seen: seen[2] == set(beating),
                timeout=5 * SWEEP,
                what="the control to evict the silent half",
            )
            assert not renewing.done(), renewing  # a failed heartbeat fails the test
        finally:
            renewing.cancel()
    assert (0.0, len(INSTANCES)) == (evicted, len(listed))
    assert False is held["evicting"], held
    assert "looks like a network failure" in held["reason"], held
    assert f"renewals in the last {WINDOW} s" in held["reason"], held
    assert len(INSTANCES) - len(beating) == control_evicted


async def _seen(
    session: aiohttp.ClientSession, base: str
) -> tuple[dict[str, Any], float, set[str]]:
    """A server's self-preservation status, its evictions and the instances it lists."""
    async with session.get(base + "/eureka/status", headers=JSON) as response:
        held = orjson.loads(await response.read())["selfPreservation"]
    # The listing before the count: an eviction between the two reads then shows in the
    # count, never in the listing alone.
    async with session.get(base + "/eureka/apps/ORDERS", headers=JSON) as response:
        listed = {i["instanceId"] for i in (await response.json())["application"]["instance"]}
    async with session.get(base + "/metrics") as response:
        metrics = await response.read()
    evicted = re.search(rb"^registry_evictions_total (\S+)$", metrics, re.M)
    assert evicted is not None
    return held, float(evicted[1]), listed
