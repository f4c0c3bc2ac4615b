"""Half of the heartbeats stop at once, as when a network failure cuts off half the clients: a
real server process holds eviction by self-preservation and says why, and evicts nothing,
though the silent half's leases run out. It takes the server's first minute of counting
renewals and a lease's life: about three minutes.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.helpers import free_port, instance_doc, registry_process, until_ready

pytestmark = pytest.mark.slow

# Renewed every 30 s as stock clients do; a lease that outlives the minute the server counts
# renewals over, so the count shows the drop before the first silent lease runs out.
LEASE = {"renewalIntervalInSecs": 30, "durationInSecs": 120}
INSTANCES = [f"i-{n}" for n in range(20)]
JSON = {"Accept": "application/json"}


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    with (tmp_path / "server.log").open("wb") as log:
        process = registry_process(port, {"store": "false", "fetch_rate_limit": "0"}, log)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(20)


async def test_half_the_heartbeats_stopping_holds_eviction_and_says_why(base):
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        await until_ready(session, base)
        started = time.monotonic()
        for iid in INSTANCES:
            doc = {"instance": instance_doc("ORDERS", iid, leaseInfo=LEASE)}
            async with session.post(base + "/eureka/apps/ORDERS", json=doc) as response:
                assert 204 == response.status
        beating = list(INSTANCES)

        async def heartbeats() -> None:
            while True:
                await asyncio.sleep(LEASE["renewalIntervalInSecs"])
                for iid in list(beating):
                    async with session.put(f"{base}/eureka/apps/ORDERS/{iid}") as response:
                        assert 200 == response.status

        renewing = asyncio.ensure_future(heartbeats())
        try:
            await asyncio.sleep(45 - (time.monotonic() - started))
            del beating[len(beating) // 2 :]  # half of them fall silent at once
            # Past the silent leases' end (45 s after their last renewal at 30 s + 120 s),
            # and a few eviction sweeps (every 5 s).
            await asyncio.sleep(30 + LEASE["durationInSecs"] + 15 - (time.monotonic() - started))
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
