"""Bodies, calls and waits shared by the tests, and looks into an app (its registry, its
metrics) or a store file."""

from __future__ import annotations

import asyncio
import inspect
import socket
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import orjson
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

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


def evict_expired(registry: Registry, *, now_ms: int, extra_ms: int = 0) -> int:
    """Evict every expired lease at once, as a sweep without a cap does."""
    return sum(
        registry.evict(
            lease.instance.app, lease.instance.instance_id, now_ms=now_ms, extra_ms=extra_ms
        )
        for lease in list(registry.leases())
    )


Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(client: TestClient) -> Metrics:
    """`GET /metrics`, parsed by prometheus-client's own parser: (name, labels) -> value."""
    response = await client.get("/metrics")
    assert 200 == response.status
    assert response.headers["Content-Type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(await response.text())
        for sample in family.samples
    }


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
        accepted = accept(value)  # type: ignore[arg-type]
        if accepted is NotImplemented:  # a dunder like "UP".__eq__ given a None: no answer
            raise TypeError(f"{what}: {accept!r} cannot judge {value!r}")
        if accepted:
            return value  # type: ignore[return-value]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what}: not true within {timeout} s; last value: {value!r}")
        await asyncio.sleep(POLL)


async def sql(path: Path, *statements: str) -> list[tuple[object, ...]]:
    """Run statements on a connection of our own (as another process would); the last's rows."""

    def run() -> list[tuple[object, ...]]:
        db = sqlite3.connect(path)
        try:
            rows: list[tuple[object, ...]] = []
            for statement in statements:
                rows = db.execute(statement).fetchall()
            db.commit()
            return rows
        finally:
            db.close()

    return await asyncio.to_thread(run)


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


ROOT = Path(__file__).resolve().parents[1]  # the repository


async def next_event(response: ClientResponse) -> dict[str, Any]:
    """The next event (or comment) of a stream, as its fields; data parsed as JSON."""
    raw = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 5)
    fields: dict[str, Any] = {}
    for line in raw.decode().strip("\n").split("\n"):
        name, _, value = line.partition(": ") if not line.startswith(":") else ("", "", line)
        if not name:
            fields["comment"] = line
        elif name == "data":
            fields["data"] = orjson.loads(value)
        else:
            fields[name] = value
    return fields
