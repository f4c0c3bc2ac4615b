"""Watch streams in numbers against a real server process with credentials: filtered streams
during registration churn, and the caps on streams per credential and per node.

As in test_hostile_clients.py, a probe heartbeats one instance every PROBE_INTERVAL on a
connection of its own while the streams do their worst, and its longest round trip must stay
under PROBE_BOUND; refusals are 429s in JSON, counted in /metrics.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fault.test_hostile_clients import CLIENT, PROBE_BOUND, Server, auth
from tests.helpers import eventually, instance_doc
from tests.processes import ServerProcess

pytestmark = pytest.mark.slow

OTHER, THIRD = "other:0th3r-pw", "third:thr33-pw"
PER_CREDENTIAL, PER_NODE = 300, 400
CHURN_APPS = [f"CHURN-{n:03}" for n in range(200)]
NAMES = 100  # each stream's filter: 100 of the churned applications
CHURN_SECONDS, CHURN_WORKERS = 3.0, 8
MAX_COST_RATIO = 15  # a change's CPU time with the streams open, against none open


async def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process `pid` has used so far (Linux: /proc)."""

    def read() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    return await asyncio.to_thread(read)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("hostile-watch")
    server = ServerProcess(
        directory / "server.log",
        settings={
            "store__enabled": "false",
            "limits__fetch_rate_limit": "0",
            "credentials__clients": ",".join([CLIENT, OTHER, THIRD]),
            "reads__watch_streams_per_credential": PER_CREDENTIAL,
            "reads__watch_streams_max": PER_NODE,
        },
    )
    server.spawn()
    try:
        yield server
    finally:
        server.stop_blocking()


@pytest.fixture
async def server(served: ServerProcess) -> AsyncIterator[Server]:
    async with Server.probing(served) as server:
        yield server
        await eventually(
            lambda: metrics(server), lambda m: m["registry_watchers"] == 0, what="streams closed"
        )


async def metrics(server: Server) -> dict[str, float]:
    """/metrics by sample name, a labelled one as `name{value}`."""
    async with server.session.get(server.base + "/metrics", headers=auth(CLIENT)) as r:
        text = await r.text()
    return {
        sample.name + "".join(f"{{{v}}}" for v in sample.labels.values()): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class Streams:
    """Watch streams held open and read to the end, their events counted."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.events: list[int] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self, credential: str, apps: list[str]) -> None:
        url = self.server.eureka + "watch?apps=" + ",".join(apps)
        response = await self.server.session.get(url, headers=auth(credential))
        assert 200 == response.status, await response.text()
        await response.content.readuntil(b"event: watching")
        slot = len(self.events)
        self.events.append(0)

        async def read() -> None:
            try:
                async for chunk in response.content.iter_any():
                    self.events[slot] += chunk.count(b"\nevent: ")
            finally:
                response.close()  # the connection too: the server ends the stream at once

        self._tasks.append(asyncio.ensure_future(read()))

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def churn(server: Server, seconds: float) -> int:
    """Registrations and cancels of short-lived instances across CHURN_APPS, from
    CHURN_WORKERS clients for `seconds`; how many were made."""
    made = 0
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    headers = auth(CLIENT) | {"Content-Type": "application/json"}

    async def worker(w: int) -> None:
        nonlocal made
        n = 0
        while loop.time() < until:
            app, iid = CHURN_APPS[(w * 31 + n) % len(CHURN_APPS)], f"c-{w}-{n}"
            body = orjson.dumps({"instance": instance_doc(app, iid)})
            url = server.eureka + f"apps/{app}"
            async with server.session.post(url, data=body, headers=headers) as r:
                assert 204 == r.status
            async with server.session.delete(f"{url}/{iid}", headers=headers) as r:
                assert 200 == r.status
            made += 2
            n += 1

    await asyncio.gather(*(worker(w) for w in range(CHURN_WORKERS)))
    return made


async def refused(server: Server, credential: str) -> dict[str, Any]:
    async with server.session.get(
        server.eureka + "watch?apps=ORDERS", headers=auth(credential)
    ) as r:
        assert (429, "30") == (r.status, r.headers.get("Retry-After"))
        return orjson.loads(await r.read())  # type: ignore[no-any-return]


async def test_filtered_streams_during_churn_leave_heartbeats_and_churn_alone(
    served: ServerProcess, server: Server
) -> None:
    """300 streams, each watching 100 of 200 applications whose instances come and go from 8
    clients: the heartbeats go on, a change costs the server at most MAX_COST_RATIO times
    the CPU time it costs with no stream open, and every stream hears of the churn. Before,
    each change woke, filtered and wrote every stream and worked out each filter's hashcode
    over its names: a change cost 26 to 31 times as much (10 ms), the churn kept a fifth of
    its pace and a heartbeat waited up to 340 ms; since, 6 to 7 times (2 ms)."""
    started = await cpu_seconds(served.pid)
    alone = await churn(server, CHURN_SECONDS)
    cost_alone = (await cpu_seconds(served.pid) - started) / alone
    rng = random.Random(7)
    streams = Streams(server)
    try:
        for _ in range(PER_CREDENTIAL):
            await streams.open(CLIENT, rng.sample(CHURN_APPS, NAMES))
        started = await cpu_seconds(served.pid)
        made, longest = await server.probed(churn(server, CHURN_SECONDS))
        cost = (await cpu_seconds(served.pid) - started) / made
        assert longest < PROBE_BOUND, longest
        assert cost < MAX_COST_RATIO * cost_alone, (cost, cost_alone)
        # Every stream has heard of the changes it watches, sooner or later.
        await eventually(lambda: min(streams.events), lambda n: n > 0, what="events heard")
    finally:
        await streams.aclose()


async def test_streams_past_the_caps_are_refused(server: Server) -> None:
    """A credential's 301st stream is refused, another credential's are not until the node
    holds 400; then anyone's is, each refusal counted by its cap."""
    before = await metrics(server)
    streams = Streams(server)
    try:
        for k in range(PER_CREDENTIAL):
            await streams.open(CLIENT, [f"APP-{k}"])
        body = await refused(server, CLIENT)
        assert "watch_streams_per_credential" in body["detail"]
        for k in range(PER_NODE - PER_CREDENTIAL):
            await streams.open(OTHER, [f"APP-{k}"])
        body = await refused(server, THIRD)
        assert "watch_streams_max" in body["detail"]
        after = await metrics(server)
        refusals = [
            after[f"registry_watch_refused_total{{{reason}}}"]
            - before[f"registry_watch_refused_total{{{reason}}}"]
            for reason in ("credential", "node")
        ]
        assert (PER_NODE, [1, 1]) == (after["registry_watchers"], refusals)
    finally:
        await streams.aclose()
