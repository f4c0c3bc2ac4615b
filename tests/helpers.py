"""Bodies, calls and waits shared by the tests."""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson
from aiohttp.test_utils import TestClient

from registry.appkeys import REGISTRY
from registry.core.registry import Registry

JSON = {"Accept": "application/json"}
DEFAULT_DC = {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"}


def instance_doc(app: str = "ORDERS", iid: str = "i-1", **fields: Any) -> dict[str, Any]:
    """An instance in the shape the Netflix Java client sends; `fields` replace or add keys."""
    doc: dict[str, Any] = {
        "instanceId": iid,
        "hostName": f"{iid}.example.internal",
        "app": app,
        "ipAddr": "10.0.0.5",
        "status": "UP",
        "overriddenStatus": "UNKNOWN",
        "port": {"$": 8080, "@enabled": "true"},
        "securePort": {"$": 443, "@enabled": "false"},
        "countryId": 1,
        "dataCenterInfo": dict(DEFAULT_DC),
        "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
        "metadata": {"management.port": "8080"},
        "vipAddress": app.lower(),
        "secureVipAddress": app.lower(),
        "lastDirtyTimestamp": "1735689000000",
    }
    doc.update(fields)
    return {key: value for key, value in doc.items() if value is not ...}


async def register(
    client: TestClient, app: str = "ORDERS", iid: str = "i-1", **fields: Any
) -> None:
    """Register through the API and insist on Eureka's 204."""
    response = await client.post(
        f"/eureka/apps/{app}",
        data=orjson.dumps({"instance": instance_doc(app, iid, **fields)}),
        headers={"Content-Type": "application/json"},
    )
    assert 204 == response.status, await response.text()


async def fetch_json(client: TestClient, path: str) -> Any:
    response = await client.get(path, headers=JSON)
    assert 200 == response.status, await response.text()
    return await response.json()


def registry_of(client: TestClient) -> Registry:
    return client.app[REGISTRY]  # type: ignore[index]


T = TypeVar("T")
POLL = 0.02  # seconds between looks, while waiting for something real (a network round trip)


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports nothing listens on now."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


async def eventually(
    probe: Callable[[], T | Awaitable[T]],
    accept: Callable[[T], object] = bool,
    *,
    timeout: float = 10.0,
    what: str = "the condition",
) -> T:
    """Call `probe` (plain or async) until `accept` holds for what it returns; that value, or
    AssertionError naming `what`. For waiting on real processes and round trips; time on a
    registry's clock is moved by the test, never waited for."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if accept(value):  # type: ignore[arg-type]
            return value  # type: ignore[return-value]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what}: not true within {timeout} s; last value: {value!r}")
        await asyncio.sleep(POLL)


@asynccontextmanager
async def locked(path: Path, *, exclusive: bool = False) -> AsyncIterator[None]:
    """Another connection holds the write lock (as another process would) until the block ends;
    `exclusive`: reading is locked out too."""
    ready, release = threading.Event(), threading.Event()

    def hold() -> None:
        db = sqlite3.connect(path, isolation_level=None)
        if exclusive:
            db.execute("PRAGMA locking_mode = EXCLUSIVE")
        db.execute("BEGIN EXCLUSIVE" if exclusive else "BEGIN IMMEDIATE")
        ready.set()
        release.wait(30)
        db.execute("ROLLBACK")
        db.close()

    holder = asyncio.ensure_future(asyncio.to_thread(hold))
    await asyncio.to_thread(ready.wait, 5)
    try:
        yield
    finally:
        release.set()
        await holder


async def until_ready(session: aiohttp.ClientSession, base: str, *, timeout: float = 20) -> None:
    """Poll a server process's `/readyz` (at `base`, without /eureka) until it answers 200."""

    async def status() -> int:
        try:
            async with session.get(base + "/readyz") as response:
                return response.status
        except aiohttp.ClientError:
            return 0

    await eventually(status, lambda code: code == 200, timeout=timeout, what="ready")


ROOT = Path(__file__).resolve().parents[1]


def registry_env(settings: dict[str, str]) -> dict[str, str]:
    """The environment of a server process: `settings` as REGISTRY_* variables, none
    inherited from the test's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    return env | {f"REGISTRY_{key.upper()}": value for key, value in settings.items()}


def registry_process(port: int, settings: dict[str, str], stderr: Any) -> subprocess.Popen[bytes]:
    """`python -m registry serve` on `port` with `settings` (see `registry_env`), its stderr
    to `stderr`."""
    env = registry_env(settings)
    return subprocess.Popen(
        [sys.executable, "-m", "registry", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
