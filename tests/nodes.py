"""Registry server processes on loopback for the cluster and fault tests: each node started
with every node's URL in `--peers` (it skips its own), short timings through `REGISTRY_*`
variables, killed and started again on the same port. Propagation is awaited by polling a
condition until a deadline, never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson

from tests.helpers import JSON, eventually, free_ports, instance_doc
from tests.processes import READY_TIMEOUT, ServerProcess

T = TypeVar("T")

REPLICATION = {"x-netflix-discovery-replication": "true"}
# Short timings, so that every step of a test takes a second or two at most.
TIMINGS = {
    # These nodes keep no state on disk: a restarted one starts empty and copies its peers.
    "store__enabled": "false",
    "peers__batch_delay": 0.05,
    "peers__max_backoff": 1,
    "peers__anti_entropy_interval": 1,
    "peers__sync_budget": 5,
    "peers__sync_empty_window": 10,
}


def base_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/eureka/"


class Node:
    """One server process, which can be killed and started again on the same port."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        log: Path,
        port: int,
        peers: list[int] | None,
        config: Path | None,
        settings: dict[str, object],
    ) -> None:
        self.port = port
        self.url = base_url(port)
        args = []
        if peers is not None:
            args += ["--peers", ",".join(base_url(p) for p in peers)]
        if config is not None:
            args += ["--config", str(config)]
        env = {"logging__level": "warning", "logging__format": "json", **TIMINGS, **settings}
        self.server = ServerProcess(log, port, settings=env, args=args)
        self.settings = self.server.settings  # what a test changes here, a restart takes
        self._session = session

    async def start(self) -> None:
        """Start the process; returns once it answers `GET status` (or fails, with its log):
        a node whose peers are not up yet serves no reads, but answers that."""
        await self.server.start(ready="/eureka/status")

    async def kill(self) -> None:
        """SIGKILL: no drain, no goodbye to the peers."""
        await self.server.kill()

    def signal(self, sig: int) -> None:
        self.server.send_signal(sig)

    # HTTP

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """One request under `/eureka/`; the status and the JSON body (None when empty)."""
        all_headers = {**JSON, **(headers or {})}
        data = None
        if body is not None:
            data = orjson.dumps(body)
            all_headers["Content-Type"] = "application/json"
        async with self._session.request(
            method, self.url + path, data=data, headers=all_headers
        ) as response:
            raw = await response.read()
            return response.status, orjson.loads(raw) if raw else None

    async def register(self, app: str, iid: str, *, replication: bool = False) -> None:
        status, answer = await self.call(
            "POST",
            f"apps/{app}",
            body={"instance": instance_doc(app, iid)},
            headers=REPLICATION if replication else None,
        )
        assert 204 == status, answer

    async def instance(self, app: str, iid: str) -> dict[str, Any] | None:
        """The instance as this node serves it, or None on a 404."""
        status, answer = await self.call("GET", f"apps/{app}/{iid}")
        if status == 404:
            return None
        assert 200 == status, answer
        return answer["instance"]  # type: ignore[no-any-return]

    async def status(self) -> dict[str, Any]:
        status, answer = await self.call("GET", "status")
        assert 200 == status, answer
        return answer  # type: ignore[no-any-return]

    async def serving_reads(self) -> bool:
        return "true" == (await self.status())["generalStats"]["serving-reads"]

    async def registry(self) -> tuple[str, frozenset[str]]:
        """`apps__hashcode` and every instance id, from `GET apps`."""
        status, answer = await self.call("GET", "apps")
        assert 200 == status, answer
        apps = answer["applications"]
        ids = frozenset(i["instanceId"] for app in apps["application"] for i in app["instance"])
        return apps["apps__hashcode"], ids

    async def digests(self) -> dict[str, str]:
        status, answer = await self.call("GET", "peerreplication/digest")
        assert 200 == status, answer
        return answer["applications"]  # type: ignore[no-any-return]


class Nodes:
    """The processes a test started, their logs in its directory; all are killed when it
    ends."""

    def __init__(self, session: aiohttp.ClientSession, directory: Path) -> None:
        self.session = session
        self.directory = directory
        self.started: list[Node] = []

    async def start(
        self,
        port: int,
        peers: list[int] | None = None,
        *,
        config: Path | None = None,
        **settings: object,
    ) -> Node:
        log = self.directory / f"node-{port}.log"
        node = Node(self.session, log, port, peers, config, settings)
        self.started.append(node)
        await node.start()
        return node

    async def cluster(self, count: int, **settings: object) -> list[Node]:
        """`count` nodes that list each other, started together, once all serve reads."""
        ports = free_ports(count)
        nodes = await asyncio.gather(*(self.start(port, ports, **settings) for port in ports))
        for node in nodes:
            await eventually(node.serving_reads, timeout=READY_TIMEOUT)
        return list(nodes)

    async def stop_all(self) -> None:
        for node in self.started:
            await node.kill()
        for node in self.started:  # pytest shows this only when the test failed
            print(await node.server.tail())
