"""What the scale scenario sends, and how it times what it sends.

Its sizes; its instances, each with the registration body and heartbeat a fleet's client would
send; and timed requests over aiohttp sessions that leave answers compressed. Shared by the
scenario (`tests.bench.scale`) and its helper processes (`tests.bench.scale_clients`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.bench import workloads
from tests.bench.scenarios import _percentile

REQUEST_TIMEOUT = 120.0  # seconds, for any one request
FORMS = {  # name: request headers
    "json": {"Accept": "application/json"},
    "xml": {"Accept": "application/xml"},
    "json+gzip": {"Accept": "application/json", "Accept-Encoding": "gzip"},
    "xml+gzip": {"Accept": "application/xml", "Accept-Encoding": "gzip"},
}
JSON_BODY = {"Content-Type": "application/json"}
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")


@dataclass(frozen=True)
class Sizes:
    instances: int
    apps: int
    seconds: float


# Instances ----------------------------------------------------------------------------------


def scale_instance(k: int, apps: int) -> tuple[str, str, str]:
    """(app, instance id, ip) of the k-th instance, the applications taking turns."""
    ip = f"10.{k // 65536 % 256}.{k // 256 % 256}.{k % 256}"
    return f"SCALE{k % apps}", f"scale-{k}", ip


async def register_scale(
    url: str,
    instances: int,
    apps: int,
    shaped: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Register the first `instances` scale instances at `url`, 32 at a time, each instance's
    wire form passed to `shaped` first (a scenario's own fields); Eureka's 204 insisted on."""
    queue = iter(range(instances))

    async def worker(session: aiohttp.ClientSession) -> None:
        for k in queue:
            app, iid, ip = scale_instance(k, apps)
            body = workloads.instance_body(app, iid, ip)
            if shaped is not None:
                shaped(body["instance"])  # type: ignore[arg-type]
            async with session.post(f"{url}/eureka/apps/{app}", json=body) as response:
                if response.status != 204:
                    raise RuntimeError(f"registration of {iid} answered {response.status}")

    connector = aiohttp.TCPConnector(limit=32)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(32)))


def registration(k: int, apps: int, lease: tuple[int, int] | None = None) -> tuple[str, bytes]:
    """The k-th instance's registration path and JSON body, with the metadata a Spring Cloud
    service typically carries (VIP address: the application's name in lower case); `lease`:
    its renewal interval and duration in seconds, when not the bench's default."""
    app, iid, ip = scale_instance(k, apps)
    body = workloads.instance_body(app, iid, ip)
    if lease is not None:
        body["instance"]["leaseInfo"] = {  # type: ignore[index]
            "renewalIntervalInSecs": lease[0],
            "durationInSecs": lease[1],
        }
    body["instance"]["metadata"] = {  # type: ignore[index]
        "management.port": "8081",
        "zone": ZONES[k % len(ZONES)],
        "version": f"2.{k % 7}.{k % 13}",
        "git.commit": hashlib.sha1(app.encode()).hexdigest(),
        "profile": "production",
    }
    # json, not orjson: each small result of orjson's kept about 8 KB resident (measured with
    # orjson 3.13), and the registering process holds all of them at once
    return f"/eureka/apps/{app}", json.dumps(body, separators=(",", ":")).encode()


def heartbeat_path(k: int, apps: int) -> str:
    app, iid, _ = scale_instance(k, apps)
    return f"/eureka/apps/{app}/{iid}?status=UP&lastDirtyTimestamp={workloads.DIRTY_MS}"


# Timings ------------------------------------------------------------------------------------


@dataclass
class Timings:
    """Round trips of one kind of request, and how many failed, timed out or were skipped."""

    ms: list[float] = field(default_factory=list)  # to the answer's last byte
    answered_ms: list[float] = field(default_factory=list)  # to its status line and headers
    sizes: list[int] = field(default_factory=list)
    errors: int = 0
    timeouts: int = 0
    skipped: int = 0  # fell due while the one before was still out
    sent_at: list[float] = field(default_factory=list)  # monotonic, beside `ms`
    error_kinds: collections.Counter[str] = field(default_factory=collections.Counter)

    def failed(self, kind: str) -> None:
        """Count an error: `kind` names the exception, or the status answered."""
        self.errors += 1
        self.error_kinds[kind] += 1

    async def request(
        self,
        session: aiohttp.ClientSession,
        method: str,
        url: str,
        *,
        headers: dict[str, str],
        data: bytes | None = None,
        expect: int = 200,
    ) -> None:
        """One request, timed to its headers and to its last byte; only `headers` ask for gzip
        (aiohttp's own default would). The body is counted as it comes, not kept: holding
        100 MB in the client would time the client."""
        started = time.perf_counter()
        size = 0
        try:
            async with session.request(
                method, url, headers=headers, data=data, skip_auto_headers=["Accept-Encoding"]
            ) as response:
                answered = time.perf_counter()
                async for chunk in response.content.iter_chunked(1 << 20):
                    size += len(chunk)
        except TimeoutError:
            self.timeouts += 1
            return
        except aiohttp.ClientError as exc:
            self.failed(type(exc).__name__)
            return
        if response.status != expect:
            self.failed(f"status {response.status}")
            return
        self.ms.append(1000 * (time.perf_counter() - started))
        self.sent_at.append(time.monotonic() - self.ms[-1] / 1000)
        self.answered_ms.append(1000 * (answered - started))
        self.sizes.append(size)

    def split(self, at: float) -> tuple[Timings, Timings]:
        """Those sent before `at` (monotonic), and the others with every failure (which
        are not timed)."""
        before, after = Timings(), dataclasses.replace(self, ms=[], answered_ms=[], sizes=[])
        after.sent_at = []
        for sample in zip(self.ms, self.answered_ms, self.sizes, self.sent_at, strict=True):
            part = before if sample[3] < at else after
            part.ms.append(sample[0])
            part.answered_ms.append(sample[1])
            part.sizes.append(sample[2])
            part.sent_at.append(sample[3])
        return before, after

    def slowest(self, since: float, count: int = 5) -> list[dict[str, float]]:
        """The `count` slowest round trips, each with when it was sent, in seconds from
        `since` (monotonic)."""
        pairs = sorted(zip(self.ms, self.sent_at, strict=True), reverse=True)[:count]
        return [{"sent_at_s": round(at - since, 2), "ms": round(ms, 1)} for ms, at in pairs]

    def summary(self) -> dict[str, Any]:
        return {
            "count": len(self.ms),
            "p50_ms": _percentile(self.ms, 0.50),
            "p99_ms": _percentile(self.ms, 0.99),
            "max_ms": _percentile(self.ms, 1.0),
            "median_ms": round(statistics.median(self.ms), 1) if self.ms else None,
            "answered_median_ms": _percentile(self.answered_ms, 0.50),
            "answered_max_ms": _percentile(self.answered_ms, 1.0),
            "bytes_median": round(statistics.median(self.sizes)) if self.sizes else None,
            "errors": self.errors,
            "error_kinds": dict(self.error_kinds),
            "timeouts": self.timeouts,
            "skipped": self.skipped,
        }


def new_session(limit: int) -> aiohttp.ClientSession:
    """A session that leaves answers compressed; `limit` connections (0: no limit), kept open
    while idle as long as a request may last."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, keepalive_timeout=REQUEST_TIMEOUT),
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT),
        auto_decompress=False,
    )


def new_status_session() -> aiohttp.ClientSession:
    """For `status`, which may come gzipped (aiohttp asks for it) and is read as JSON."""
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT))
