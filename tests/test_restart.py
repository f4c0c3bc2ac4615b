"""Warm restarts of a real server process on loopback: what was acknowledged comes back.

The server runs as `python -m registry serve` with its store in the test's directory. It is
stopped with SIGTERM (a drain: everything pending is written) or SIGKILL (nothing more is
written), then started again on the same data.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.helpers import instance_doc
from tests.processes import ServerProcess, Servers

pytestmark = pytest.mark.slow

TIMEOUT = 15.0
JSON = {"Accept": "application/json"}


class Server:
    """The server under test, started again on its data after each stop."""

    def __init__(self, session: aiohttp.ClientSession, process: ServerProcess) -> None:
        self.session = session
        self.process = process
        self.base = f"{process.base}/eureka"

    async def start(self) -> None:
        await self.process.start(ready="/eureka/apps")

    async def stop(self, sig: int) -> None:
        await self.process.stop(sig, timeout=TIMEOUT)

    async def until(self, probe: Any) -> None:
        """Poll `probe` until it holds; a real process needs real time to write."""
        deadline = asyncio.get_running_loop().time() + TIMEOUT
        while not await probe():
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.05)

    async def written(self) -> bool:
        """Nothing is waiting to be written behind."""
        store = (await self.get("status"))["store"]
        return store.get("pending", 0) == 0 and not store.get("degraded", False)

    async def get(self, path: str) -> Any:
        async with self.session.get(f"{self.base}/{path}", headers=JSON) as response:
            assert 200 == response.status, await response.text()
            return await response.json()

    async def call(self, method: str, path: str, body: Any = None) -> int:
        async with self.session.request(method, f"{self.base}/{path}", json=body) as response:
            return response.status

    async def register(self, app: str, iid: str) -> None:
        assert 204 == await self.call("POST", f"apps/{app}", {"instance": instance_doc(app, iid)})

    async def instances(self) -> dict[str, tuple[str, str]]:
        """instance id -> (status, overriddenStatus), failing on a duplicate."""
        seen: dict[str, tuple[str, str]] = {}
        for app in (await self.get("apps"))["applications"]["application"]:
            for i in app["instance"]:
                assert i["instanceId"] not in seen, f"{i['instanceId']} twice"
                seen[i["instanceId"]] = (i["status"], i["overriddenStatus"])
        return seen


@pytest.fixture
async def server(servers: Servers, tmp_path: Path) -> AsyncIterator[Server]:
    process = servers.new(
        store__data_dir=tmp_path / "data", logging__level="warning", logging__format="json"
    )
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        yield Server(session, process)


async def populate(server: Server) -> dict[str, tuple[str, str]]:
    """30 registrations in 3 apps, concurrently; 5 overrides, one deleted; 2 cancels."""
    ids = [(f"APP{n % 3}", f"i-{n}") for n in range(30)]
    await asyncio.gather(*(server.register(app, iid) for app, iid in ids))
    for app, iid in ids[:5]:
        assert 200 == await server.call("PUT", f"apps/{app}/{iid}/status?value=OUT_OF_SERVICE")
    assert 200 == await server.call("DELETE", f"apps/{ids[4][0]}/{ids[4][1]}/status?value=UP")
    for app, iid in ids[-2:]:
        assert 200 == await server.call("DELETE", f"apps/{app}/{iid}")
    expected = {iid: ("UP", "UNKNOWN") for _, iid in ids[:-2]}
    expected |= {iid: ("OUT_OF_SERVICE", "OUT_OF_SERVICE") for _, iid in ids[:4]}
    return expected


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
async def test_a_restart_brings_back_the_registry_and_its_overrides(server, sig):
    """Everything acknowledged and written behind is back, once each, overrides in force."""
    await server.start()
    expected = await populate(server)
    await server.until(server.written)  # the write-behind interval has passed
    await server.stop(sig)
    await server.start()
    assert expected == await server.instances()
    overrides = await server.get("serverinfo/statusoverrides")
    assert {f"i-{n}" for n in range(4)} <= set(overrides)


async def test_an_acknowledged_override_survives_an_immediate_kill(server):
    """An override is on disk before its 200: SIGKILL right after it loses nothing."""
    await server.start()
    await server.register("ORDERS", "i-1")
    await server.until(server.written)
    assert 200 == await server.call("PUT", "apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
    await server.stop(signal.SIGKILL)
    await server.start()
    assert {"i-1": ("OUT_OF_SERVICE", "OUT_OF_SERVICE")} == await server.instances()


async def test_registrations_acknowledged_just_before_a_kill_are_there_or_not_but_never_twice(
    server,
):
    """Registrations younger than the write-behind interval may be lost to SIGKILL; whatever
    is back is back once, and restored instances keep renewing."""
    await server.start()
    await asyncio.gather(*(server.register("ORDERS", f"i-{n}") for n in range(50)))
    await server.stop(signal.SIGKILL)
    await server.start()
    back = await server.instances()
    assert set(back) <= {f"i-{n}" for n in range(50)}
    for iid in back:
        assert 200 == await server.call("PUT", f"apps/ORDERS/{iid}")


STREAM_SECONDS = 1.5  # how long the stream runs before the stop
SETTLED = 1.0  # a registration acknowledged this long before a SIGKILL must be back


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
async def test_a_stop_in_the_middle_of_a_stream(server, sig):
    """Registrations and overrides keep coming when the server is stopped. After the restart
    every acknowledged override is back with its reason; every registration is back if it was
    acknowledged before a SIGTERM, or SETTLED before a SIGKILL (it has been written behind by
    then, every store_flush_interval); nothing is back twice."""
    await server.start()
    loop = asyncio.get_running_loop()
    acked: dict[str, float] = {}  # instance id -> when its 204 came
    reasons: dict[str, str] = {}  # instance id -> the reason of its acknowledged override
    unsure: set[str] = set()  # its last override call got no answer: it may or may not be in
    stopping = asyncio.Event()

    async def registrations() -> None:
        for n in range(5_000):
            if stopping.is_set():
                return
            try:
                status = await server.call(
                    "POST", "apps/STREAM", {"instance": instance_doc("STREAM", f"s-{n}")}
                )
            except aiohttp.ClientError:
                return  # the server is gone
            if status == 204:
                acked[f"s-{n}"] = loop.time()

    async def overrides() -> None:
        for k in range(1_000):
            if stopping.is_set() or not acked:
                await asyncio.sleep(0.01)
                continue
            iid = list(acked)[-1]
            try:
                status = await server.call(
                    "PUT", f"apps/STREAM/{iid}/status?value=OUT_OF_SERVICE&reason=r{k}"
                )
            except aiohttp.ClientError:
                unsure.add(iid)
                return
            if status == 200:
                reasons[iid] = f"r{k}"
            await asyncio.sleep(0.01)

    stream = asyncio.gather(registrations(), overrides())
    await asyncio.sleep(STREAM_SECONDS)  # a real process under a real stream
    stopped_at = loop.time()
    await server.stop(sig)
    stopping.set()
    await stream
    await server.start()
    back = await server.instances()  # fails on a duplicate
    settled = stopped_at - (SETTLED if sig == signal.SIGKILL else 0.0)
    missing = [iid for iid, when in acked.items() if when < settled and iid not in back]
    assert [] == missing, f"{len(missing)} of {len(acked)} acknowledged registrations lost"
    assert len(acked) >= 20, "hardly a stream"
    assert reasons, "no override was acknowledged during the stream"
    listed = {o["instanceId"]: o["reason"] for o in (await server.get("overrides"))["overrides"]}
    sure = {iid: reason for iid, reason in reasons.items() if iid not in unsure}
    assert sure == {iid: listed.get(iid) for iid in sure}
