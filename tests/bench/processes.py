"""The servers under test, as real subprocesses on loopback, and what they cost in memory.

The registry's command line and environment are the test suite's (tests/processes.py); the
process itself is run here: its log goes to the terminal, its start-up is timed from the spawn
to the first answer at a poll as fine as the figure needs, its CPU and memory are read from
/proc, and the bench's other processes (the ceiling server, the observers) are run and measured
the same way.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from tests.bench import workloads
from tests.helpers import free_port
from tests.processes import registry_env, serve_command

READY_TIMEOUT = 30.0
POLL = 0.05
STOP_TIMEOUT = 60.0  # for a stopped server to write what it owes and exit


@dataclass
class Server:
    process: asyncio.subprocess.Process
    url: str
    spawned_at: float | None = None  # the event loop's time at the spawn
    # From the spawn until the ready path first answered (to within the poll interval)
    ready_seconds: float | None = None

    def cpu_seconds(self) -> float:
        """User plus system CPU time the server process has used, from /proc."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_bytes(self) -> int:
        """Resident memory of the server process, from /proc."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS line")


@asynccontextmanager
async def registry(
    port: int | None = None,
    *,
    ready_path: str | None = "/eureka/apps",
    ready_poll: float = POLL,
    code: Path | None = None,
    **settings: object,
) -> AsyncIterator[Server]:
    """`python -m registry serve` with `settings` as REGISTRY_* variables, on `port` or a free one.

    A node with peers answers `apps` only once it has copied their registry (or found them all
    starting too), so the nodes of a cluster must be started together, not one after another.
    `ready_path` answers 200 once the server is ready (`apps` by default, whose first answer
    encodes the whole registry; None: any answer at `/`, once it listens); `ready_poll` is how
    often it is tried meanwhile: finer when the start-up is the figure. `code`: a checkout
    whose registry to run instead of the one this bench imports (an earlier release, for a
    figure before a change).
    """
    port = port or free_port()
    # Made and removed in a thread: the test suite runs this too, and its loop must not block.
    data_dir = await asyncio.to_thread(tempfile.mkdtemp, prefix="bench-data-")
    try:
        env = registry_env(
            {
                "logging__level": "warning",
                "logging__format": "json",
                "store__data_dir": data_dir,  # each server's store its own, gone afterwards
                "limits__fetch_rate_limit": 0,  # the load comes from one address, on purpose
                "limits__max_connections_per_address": 0,  # and so do its thousand connections
                **settings,
            }
        )
        if code is not None:
            env["PYTHONPATH"] = str(code)
        command = serve_command(port)
        url = f"http://127.0.0.1:{port}"
        async with _process(command, env, url, ready_path, poll=ready_poll, cwd=code) as server:
            yield server
    finally:
        await asyncio.to_thread(shutil.rmtree, data_dir, True)


@asynccontextmanager
async def cluster(
    count: int, *, data_dirs: Sequence[Path] = (), **settings: object
) -> AsyncIterator[list[Server]]:
    """`count` registry nodes on loopback, each with all of them as peers (a full mesh), and
    with its store in `data_dirs`' entry when given (else one of its own, gone afterwards).

    They start together: each waits for the others before it serves reads. Should one fail to
    start, the others are stopped.
    """
    ports = [free_port() for _ in range(count)]
    peers = ",".join(f"http://127.0.0.1:{port}/eureka/" for port in ports)
    stores = [{"store__data_dir": d} for d in data_dirs] or [{} for _ in ports]
    async with AsyncExitStack() as stack:
        async with asyncio.TaskGroup() as group:
            starting = [
                group.create_task(
                    stack.enter_async_context(
                        registry(port, peers__urls=peers, **store, **settings)
                    )
                )
                for port, store in zip(ports, stores, strict=True)
            ]
        yield [task.result() for task in starting]


@asynccontextmanager
async def ceiling(payload_dir: Path) -> AsyncIterator[Server]:
    """The bare aiohttp server returning `payload_dir`'s precomputed bytes."""
    port = free_port()
    command = [sys.executable, "-m", "tests.bench.ceiling", str(port), str(payload_dir)]
    async with _process(command, dict(os.environ), f"http://127.0.0.1:{port}", None) as server:
        yield server


# The JVM as the benchmark gives it to the Eureka server: G1 (JDK 17's default) and a heap
# that holds 100 000 instances with room; said in the figures.
EUREKA_JVM = ("-Xms512m", "-Xmx3g", "-XX:+UseG1GC")


@asynccontextmanager
async def eureka_server(
    jar: Path,
    port: int | None = None,
    *,
    read_only_cache: bool = True,
    host: str = "127.0.0.1",
    peer: str | None = None,
) -> AsyncIterator[Server]:
    """Spring Cloud's Eureka server (tests/bench/eureka_server/), as its users run it: its
    read-only response cache and 30 s intervals as they come, or the cache off (what the
    Spring docs suggest for faster propagation); `peer`, the URL of the other node of a pair.

    Eureka knows itself among its service URLs by host name alone, so a standalone node names
    itself by `host`, and the two nodes of a pair on one machine take different host names
    (127.0.0.1 and localhost), as the Spring docs' peer1 and peer2 do: with one name, each
    would take the other for itself, and a standalone node left at its default service URL
    replicates to localhost:8761.
    """
    port = port or free_port()
    zone = peer or f"http://{host}:{port}/eureka/"
    args = [
        f"--server.port={port}",
        f"--eureka.instance.hostname={host}",
        f"--eureka.client.service-url.defaultZone={zone}",
        f"--eureka.server.use-read-only-response-cache={str(read_only_cache).lower()}",
        # Warnings only, as the registry runs here: not a log line per registration.
        "--logging.level.com.netflix.eureka=WARN",
    ]
    command = ["java", *EUREKA_JVM, "-jar", str(jar), *args]
    url = f"http://127.0.0.1:{port}"
    async with _process(command, dict(os.environ), url, "/eureka/apps") as server:
        yield server


@asynccontextmanager
async def _process(
    command: list[str],
    env: dict[str, str],
    url: str,
    ready_path: str | None,
    poll: float = POLL,
    cwd: Path | None = None,
) -> AsyncIterator[Server]:
    spawned = asyncio.get_running_loop().time()
    process = await asyncio.create_subprocess_exec(*command, env=env, cwd=cwd)
    server = Server(process, url, spawned_at=spawned)
    try:
        await _wait_ready(server, ready_path, poll)
        server.ready_seconds = asyncio.get_running_loop().time() - spawned
        yield server
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()


async def stop(server: Server) -> int:
    """SIGTERM, as a service manager stops it (the registry first writes what it owes to its
    store); its exit code. One that has not exited after STOP_TIMEOUT is killed, and that is an
    error."""
    if server.process.returncode is None:
        server.process.terminate()
    try:
        return await asyncio.wait_for(server.process.wait(), STOP_TIMEOUT)
    except TimeoutError:
        server.process.kill()
        await server.process.wait()
        raise RuntimeError(f"the server did not stop within {STOP_TIMEOUT} s of SIGTERM") from None


async def _wait_ready(server: Server, path: str | None, poll: float = POLL) -> None:
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(server.url + (path or "/")) as response:
                    if path is None or response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            if server.process.returncode is not None:
                raise RuntimeError(f"server exited with {server.process.returncode}")
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError("server did not start")
            await asyncio.sleep(poll)


async def populate(server: Server, count: int, *, start: int = 0, concurrency: int = 32) -> None:
    """Register `count` benchmark instances, `concurrency` requests at a time."""
    queue = iter(range(start, start + count))

    async def worker(session: aiohttp.ClientSession) -> None:
        for k in queue:
            await register(session, server, *workloads.bench_instance(k))

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))


async def register(
    session: aiohttp.ClientSession, server: Server, app: str, iid: str, ip: str
) -> None:
    """Register one bench instance, insisting on Eureka's 204."""
    body = orjson.dumps(workloads.instance_body(app, iid, ip))
    async with session.post(
        f"{server.url}/eureka/apps/{app}", data=body, headers={"Content-Type": "application/json"}
    ) as response:
        if response.status != 204:
            raise RuntimeError(f"registration of {iid} answered {response.status}")
