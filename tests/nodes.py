"""Registry server processes on loopback for the cluster and fault tests: each node started
with every node's URL in `--peers` (it skips its own), short timings through `REGISTRY_*`
variables, killed and started again on the same port. Propagation is awaited by polling a
condition until a deadline, never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson

from tests.helpers import JSON, eventually, free_ports, instance_doc

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 20.0
POLL = 0.05
REPLICATION = {"x-netflix-discovery-replication": "true"}
# Short timings, so that every step of a test takes a second or two at most.
TIMINGS = {
    # These nodes keep no state on disk: a restarted one starts empty and copies its peers.
    "store": "false",
    "replication_batch_delay": 0.05,
    "replication_max_backoff": 1,
    "anti_entropy_interval": 1,
    "peer_sync_budget": 5,
    "peer_sync_empty_window": 10,
}


def base_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/eureka/"


class Node:
    """One server process, which can be killed and started again on the same port."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        port: int,
        peers: list[int] | None,
        config: Path | None,
        settings: dict[str, object],
    ) -> None:
        self.port = port
        self.url = base_url(port)
        self.peers = peers
        self.config = config
        self.settings = settings
        self.process: asyncio.subprocess.Process | None = None
        self.stderr = bytearray()
        self._session = session
        self._drain: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the process; returns once it answers `GET status` (or fails, with its log)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
        env |= {"REGISTRY_LOG_LEVEL": "warning", "REGISTRY_LOG_FORMAT": "json"}
        env |= {f"REGISTRY_{k.upper()}": str(v) for k, v in {**TIMINGS, **self.settings}.items()}
        args = ["serve", "--port", str(self.port)]
        if self.peers is not None:
            args += ["--peers", ",".join(base_url(p) for p in self.peers)]
        if self.config is not None:
            args += ["--config", str(self.config)]
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "registry",
            *args,
            cwd=ROOT,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._drain = asyncio.create_task(self._read_stderr(self.process))
        await self._wait_ready()

    async def kill(self) -> None:
        """SIGKILL: no drain, no goodbye to the peers."""
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        if self._drain is not None:
            await self._drain
            self._drain = None

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    async def _read_stderr(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        while chunk := await process.stderr.read(65536):
            self.stderr += chunk

    async def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self._session.get(self.url + "status", headers=JSON) as response:
                    if response.status == 200:
                        return
            if self.process.returncode is not None:
                raise RuntimeError(f"{self.url} exited with {self.process.returncode}")
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"{self.url} did not answer within {READY_TIMEOUT} s")
            await asyncio.sleep(POLL)

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
    """The processes a test started; all are killed when it ends."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.started: list[Node] = []

    async def start(
        self,
        port: int,
        peers: list[int] | None = None,
        *,
        config: Path | None = None,
        **settings: object,
    ) -> Node:
        node = Node(self.session, port, peers, config, settings)
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
            print(f"--- stderr of {node.url} ---\n{node.stderr.decode(errors='replace')}")
