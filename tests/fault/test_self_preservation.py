"""Half of the heartbeats stop at once, as when a network failure cuts off half the clients: a
real server process holds eviction by self-preservation and says why, and evicts nothing,
though the silent half's leases run out.

Eureka's timeline a tenth as long, so that it takes seconds: the server counts renewals over a
6 s window instead of its minute (`renewal_window`), clients renew every 3 s instead of 30 and
hold leases of 12 s instead of 120, and sweeps run every second.
"""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp
import orjson
import pytest

from tests.helpers import instance_doc

pytestmark = pytest.mark.slow

WINDOW = 6  # seconds the server counts renewals over
# Two renewals a window each, as stock clients send two a minute; a lease that outlives the
# window, so the count shows the drop before the first silent lease runs out.
LEASE = {"renewalIntervalInSecs": 3, "durationInSecs": 12}
SWEEP = 1  # eviction_interval
INSTANCES = [f"i-{n}" for n in range(20)]
JSON = {"Accept": "application/json"}


async def test_half_the_heartbeats_stopping_holds_eviction_and_says_why(servers):
    server = await servers.start(
        store="false", fetch_rate_limit=0, renewal_window=WINDOW, eviction_interval=SWEEP
    )
    base, interval = server.base, LEASE["renewalIntervalInSecs"]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        started = time.monotonic()
        for iid in INSTANCES:
            doc = {"instance": instance_doc("ORDERS", iid, leaseInfo=LEASE)}
            async with session.post(base + "/eureka/apps/ORDERS", json=doc) as response:
                assert 204 == response.status
        beating = list(INSTANCES)

        async def heartbeats() -> None:  # at the clients' pace: the scenario runs in real time
            while True:
                await asyncio.sleep(interval)
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
            assert not renewing.done(), renewing  # a failed heartbeat fails the test
        finally:
            renewing.cancel()
        async with session.get(base + "/eureka/status", headers=JSON) as response:
            held = orjson.loads(await response.read())["selfPreservation"]
        async with session.get(base + "/metrics") as response:
            metrics = await response.read()
        async with session.get(base + "/eureka/apps/ORDERS", headers=JSON) as response:
            listed = (await response.json())["application"]["instance"]
    evicted = re.search(rb"^registry_evictions_total (\S+)$", metrics, re.M)
    assert evicted is not None and 0.0 == float(evicted[1])
    assert (False, len(INSTANCES)) == (held["evicting"], len(listed))
    assert "looks like a network failure" in held["reason"], held
    assert f"renewals in the last {WINDOW} s" in held["reason"], held
