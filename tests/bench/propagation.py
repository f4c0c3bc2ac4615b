"""The propagation scenario: how long until a change reaches those who need it, and what
evicting costs the event loop.

* crash-to-evicted: instances with a short lease stop heartbeating, one after another; a watch
  stream times their DELETED events. A lease lasts its duration after the last heartbeat and
  the next sweep evicts it, so each should go between the duration and the duration plus one
  eviction interval (plus delivery).
* register-to-visible: new instances registered one by one while watch streams, long-polls and
  stock 30 s delta polls look on (in another process: see `tests.bench.watchers`), from each
  registration's send to each observer's first sight of it.
* eviction stall: one sweep of many expired leases in this process (on the server's kind of
  event loop), while a task that sleeps 1 ms in a loop notes how late it wakes: the longest
  wait is what a heartbeat would wait. Python's garbage collections during the sweep are
  counted beside it, since a full one walks every object and stalls the loop by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families

from registry.__main__ import loop_name, new_event_loop
from registry.common.clock import SystemClock
from registry.core.eviction import Evictor
from registry.core.preservation import SelfPreservation
from registry.core.registry import Registry
from registry.logs import configure
from registry.reads.cache import ResponseCache
from registry.reads.catalog import Catalog
from registry.reads.feed import ChangeFeed
from registry.reads.journal import DeltaJournal
from tests.bench import processes, workloads
from tests.bench.gc_pauses import collections
from tests.bench.scenarios import Plan, _percentile
from tests.bench.send_floor import send_floor
from tests.factories import make

CRASH_APP = "CRASH"
RENEWAL_SECONDS = 1  # the crashing instances' heartbeat interval
DELIVERY_GRACE = 5.0  # seconds past the latest expected eviction before a DELETED counts missed
LONG_POLL_WAIT = "30s"
FANOUT_METRIC = "registry_watch_fanout_seconds"
OBSERVERS_START_TIMEOUT = 60.0  # for every watch stream to open
STALL_APPS = 50
STALL_LOG_LEVEL = "warning"  # at info every evicted lease is a log line, which would be measured
MONITOR_SLEEP = 0.001
MONITOR_MAX_TICKS = 1_000_000  # the monitor's bound should a sweep never end


@dataclass(frozen=True)
class Sizes:
    crash_instances: int  # below 10, where self-preservation does not apply
    lease_seconds: int
    eviction_interval: float
    heartbeats: int  # the first crashing instance sends this many before it stops
    watchers: int
    long_polls: int
    pollers: int
    poll_interval: float  # a stock Eureka client's registryFetchIntervalSeconds is 30
    registrations: int
    gap: tuple[float, float]  # seconds between registrations, at random: longer than the fan-out
    stall_leases: int


FULL = Sizes(5, 10, 5.0, 3, 1000, 100, 10, 30.0, 20, (0.4, 0.6), 100_000)
# Short enough for CI: a 3 s lease and 1 s sweeps, a 3 s poll interval, few observers.
SMOKE = Sizes(3, 3, 1.0, 2, 50, 10, 10, 3.0, 5, (0.2, 0.3), 10_000)


async def propagation(plan: Plan) -> dict[str, Any]:
    sizes = SMOKE if plan.smoke else FULL
    return {
        "crash_to_evicted": await crash_to_evicted(sizes),
        "register_to_visible": await register_to_visible(sizes),
        "eviction_stall": {
            "uncapped": await eviction_stall(sizes.stall_leases, max_fraction=1.0),
            "capped": await eviction_stall(sizes.stall_leases, max_fraction=0.15),
            "window_count": await eviction_stall(sizes.stall_leases, count=True),
        },
    }


# Crash to evicted ---------------------------------------------------------------------------


async def crash_to_evicted(sizes: Sizes) -> dict[str, Any]:
    """Seconds from each instance's last heartbeat to its DELETED event on a watch stream.

    The crashes are one interval and a fraction (`1/n` of it) apart: the fractions put them at
    different points of the sweep cycle, so the excess over the lease spreads from about 0 to
    one interval, and the whole interval keeps the 15 % cap out of it. In a registry this small
    (below 7) the cap lets a sweep evict only one lease, so crashes closer together would be
    evicted one per interval: a figure about the cap, not about the sweeps. A crash is timed
    at its last heartbeat's send, a little before the server stamps it, so the figures err
    long, never short.
    """
    n, lease = sizes.crash_instances, sizes.lease_seconds
    stagger = sizes.eviction_interval * (1 + 1 / n)
    ids = [f"crash-{i}" for i in range(n)]
    async with (
        processes.registry(leases__eviction_interval=sizes.eviction_interval) as server,
        aiohttp.ClientSession() as session,
    ):
        stream = await session.get(f"{server.url}/eureka/watch")
        await stream.content.readuntil(b"\n\n")  # `watching`: every later change will come
        deleted: dict[str, float] = {}
        reader = asyncio.create_task(_deletions(stream, set(ids), deleted))
        for i, iid in enumerate(ids):
            await _register(session, server, iid, f"10.250.0.{i}", lease)
        base = time.monotonic()
        crashes = await asyncio.gather(
            *(
                _heartbeat_then_crash(
                    session, server, iid, base, base + (sizes.heartbeats - 1) + i * stagger
                )
                for i, iid in enumerate(ids)
            )
        )
        latest = max(crashes) + lease + sizes.eviction_interval + DELIVERY_GRACE
        with contextlib.suppress(TimeoutError):  # the ones not seen count as missed
            await asyncio.wait_for(reader, timeout=max(0.0, latest - time.monotonic()))
        stream.close()
    seconds = {
        iid: round(deleted[iid] - crash, 3)
        for iid, crash in zip(ids, crashes, strict=True)
        if iid in deleted
    }
    over = [s - lease for s in seconds.values()]
    return {
        "instances": n,
        "lease_seconds": lease,
        "eviction_interval_seconds": sizes.eviction_interval,
        "crash_to_evicted_seconds": seconds,
        "over_lease_median_seconds": round(statistics.median(over), 2) if over else None,
        "over_lease_max_seconds": round(max(over), 2) if over else None,
        "missed": n - len(seconds),
    }


async def _register(
    session: aiohttp.ClientSession, server: processes.Server, iid: str, ip: str, lease: int
) -> None:
    body = workloads.instance_body(CRASH_APP, iid, ip)
    body["instance"]["leaseInfo"] = {  # type: ignore[index]
        "renewalIntervalInSecs": RENEWAL_SECONDS,
        "durationInSecs": lease,
    }
    async with session.post(
        f"{server.url}/eureka/apps/{CRASH_APP}",
        data=orjson.dumps(body),
        headers={"Content-Type": "application/json"},
    ) as response:
        if response.status != 204:
            raise RuntimeError(f"registration of {iid} answered {response.status}")


async def _heartbeat_then_crash(
    session: aiohttp.ClientSession, server: processes.Server, iid: str, start: float, last: float
) -> float:
    """Heartbeat every RENEWAL_SECONDS, from about `start`, ending at `last`; when the last one
    was sent."""
    url = f"{server.url}/eureka/apps/{CRASH_APP}/{iid}?status=UP"
    beats = int((last - start) // RENEWAL_SECONDS) + 1
    sent = start
    for beat in reversed(range(beats)):
        await asyncio.sleep(max(0.0, last - beat * RENEWAL_SECONDS - time.monotonic()))
        sent = time.monotonic()
        async with session.put(url) as response:
            if response.status != 200:
                raise RuntimeError(f"heartbeat of {iid} answered {response.status}")
    return sent


async def _deletions(stream: aiohttp.ClientResponse, ids: set[str], seen: dict[str, float]) -> None:
    """Note when each of `ids` is DELETED on the watch stream, until all have been."""
    while not ids <= seen.keys():
        event = await stream.content.readuntil(b"\n\n")
        if not event:
            return
        if b"\nevent: DELETED\n" in event:
            now = time.monotonic()
            iid = orjson.loads(event.split(b"\ndata: ", 1)[1])["instanceId"]
            seen.setdefault(iid, now)


# Register to visible ------------------------------------------------------------------------


async def register_to_visible(sizes: Sizes) -> dict[str, Any]:
    """Milliseconds from a registration's send until each watcher, long-poll and poller has it.

    Each kind of observer is measured on its own, against a registry of its own: the watch
    streams, the long-polls, then the pollers. (Together they share this machine's two cores
    with the registry and each other, and whichever the registry answers first makes the
    other kind wait.) The observers run in their own process (`tests.bench.watchers`); this
    one only registers and times. The pollers model stock Eureka clients, which fetch
    `apps/delta` every 30 s: rather than waiting 30 s per sample, `pollers` of them with phases
    spread evenly over one interval watch the same registrations, so each registration is
    seen at a spread of delays from about 0 to the interval, as by a fleet of clients.
    (Eureka's own server adds its 30 s read-only cache on top, and its clients' load
    balancers their own cache; neither is here.) Beside the watch streams: the floor under
    their fan-out, the same number of bare writes of one event's bytes on this machine.
    """
    expected = [workloads.bench_instance(k) for k in range(sizes.registrations)]
    counts = {"watch": sizes.watchers, "long_poll": sizes.long_polls, "poll": sizes.pollers}
    figures: dict[str, Any] = {}
    cpu_ms: dict[str, dict[str, float]] = {}
    for kind, count in counts.items():
        seconds = OBSERVERS_START_TIMEOUT + sizes.registrations * sizes.gap[1]
        spec = {
            "expected": [iid for _, iid, _ in expected],
            **dict.fromkeys(("watchers", "long_polls", "pollers"), 0),
            {"watch": "watchers", "long_poll": "long_polls", "poll": "pollers"}[kind]: count,
            "poll_interval": sizes.poll_interval,
            "wait": LONG_POLL_WAIT,
            "seconds": seconds + (2 * sizes.poll_interval if kind == "poll" else 0),
        }
        with tempfile.TemporaryDirectory(prefix="bench-observers-") as tmp:
            out = Path(tmp) / "seen.json"
            async with processes.registry() as server:
                spec = {**spec, "url": server.url, "out": str(out)}
                sent, cpu = await _observed(server, spec, expected, sizes.gap)
                if kind == "watch":
                    event_bytes = await _instance_bytes(server, expected[0])
                    fanned_out = await _fan_out_durations(server)
            report = json.loads(out.read_text())
        if report["timed_out"] or report["failures"]:
            raise RuntimeError(
                f"{kind} observers: {report['timed_out']} timed out, failures {report['failures']}"
            )
        figures[kind] = _sightings(report["seen"][kind], sent, observers=count)
        # CPU per registration while they went out, to tell whose work the delays are
        cpu_ms[kind] = {
            name: round(1000 * seconds / sizes.registrations, 1) for name, seconds in cpu.items()
        }
    figures["poll"]["interval_seconds"] = sizes.poll_interval
    figures["long_poll"]["wait"] = LONG_POLL_WAIT
    figures["watch"]["bare_writes_ms"] = await send_floor(sizes.watchers, event_bytes)
    figures["watch"]["event_bytes"] = event_bytes
    figures["watch"]["server"] = fanned_out
    return {**figures, "registrations": sizes.registrations, "cpu_ms_per_registration": cpu_ms}


async def _instance_bytes(server: processes.Server, instance: tuple[str, str, str]) -> int:
    """About the size of one ADDED event: the instance's JSON and the event's few lines."""
    app, iid, _ = instance
    async with aiohttp.ClientSession() as session:
        url = f"{server.url}/eureka/apps/{app}/{iid}"
        async with session.get(url, headers={"Accept": "application/json"}) as response:
            return len(await response.read()) + 120


async def _observed(
    server: processes.Server,
    spec: dict[str, Any],
    instances: list[tuple[str, str, str]],
    gap: tuple[float, float],
) -> tuple[dict[str, float], dict[str, float]]:
    """Start the observers, register once they are ready, and wait for them to finish.

    Returns when each registration was sent, and the CPU seconds the registry and the
    observers' process used while the registrations went out (the gaps between them included,
    so each change's fan-out is counted in full).
    """
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.bench.watchers",
        json.dumps(spec),
        stdout=asyncio.subprocess.PIPE,
    )
    observers = processes.Server(process, "")  # for its CPU figures
    try:
        assert process.stdout is not None
        ready = await asyncio.wait_for(process.stdout.readline(), OBSERVERS_START_TIMEOUT)
        if ready.strip() != b"ready":
            raise RuntimeError(f"the observers did not start: {ready[:200]!r}")
        watched = {"registry": server, "observers": observers}
        before = {name: _cpu(process) for name, process in watched.items()}
        sent = await _register_one_by_one(server, instances, gap)
        cpu = {
            name: end - start
            for name, process in watched.items()
            if (start := before[name]) is not None and (end := _cpu(process)) is not None
        }
        await asyncio.wait_for(process.communicate(), float(spec["seconds"]))
        if process.returncode != 0:
            raise RuntimeError(f"the observers exited with {process.returncode}")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return sent, cpu


async def _fan_out_durations(server: processes.Server) -> dict[str, Any]:
    """The registry's own timing of its fan-outs (`registry_watch_fanout_seconds`): from each
    change to its last write to the streams, this side of the sockets. Quantiles are the upper
    bound of the bucket they fall in."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{server.url}/metrics") as response,
    ):
        text = await response.text()
    (family,) = (f for f in text_string_to_metric_families(text) if f.name == FANOUT_METRIC)
    values = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    count, total = values[(f"{FANOUT_METRIC}_count", None)], values[(f"{FANOUT_METRIC}_sum", None)]
    cumulative = sorted(
        (float(le), n) for (name, le), n in values.items() if name.endswith("_bucket")
    )

    def quantile(q: float) -> float | None:
        bound = next((le for le, n in cumulative if n >= q * count), None) if count else None
        return None if bound is None or bound == float("inf") else round(1000 * bound, 1)

    return {
        "frames": round(count),
        "mean_ms": round(1000 * total / count, 2) if count else None,
        "p50_le_ms": quantile(0.50),
        "p99_le_ms": quantile(0.99),
    }


def _cpu(process: processes.Server) -> float | None:
    """The process's CPU seconds; None once it has exited (observers done early)."""
    try:
        return process.cpu_seconds()
    except FileNotFoundError:
        return None


async def _register_one_by_one(
    server: processes.Server, instances: list[tuple[str, str, str]], gap: tuple[float, float]
) -> dict[str, float]:
    """Register each instance in turn, `gap` apart at random; when each POST was sent."""
    rng = random.Random(1)
    sent: dict[str, float] = {}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{server.url}/eureka/apps/"):  # the connection, made beforehand
            pass
        for app, iid, ip in instances:
            sent[iid] = time.monotonic()
            await processes.register(session, server, app, iid, ip)
            await asyncio.sleep(rng.uniform(*gap))
    return sent


def _sightings(
    seen: dict[str, list[float]], sent: dict[str, float], *, observers: int
) -> dict[str, Any]:
    delays = [1000 * (t - sent[iid]) for iid, times in seen.items() for t in times]
    return {
        "observers": observers,
        "sightings": len(delays),
        "missed": observers * len(sent) - len(delays),
        "p50_ms": _percentile(delays, 0.50),
        "p99_ms": _percentile(delays, 0.99),
        "max_ms": _percentile(delays, 1.0),
    }


# Eviction stall -----------------------------------------------------------------------------


async def eviction_stall(
    leases: int, *, max_fraction: float = 0.15, count: bool = False
) -> dict[str, Any]:
    """One sweep of `leases` expired leases (in STALL_APPS applications), self-preservation off;
    with `count`, the count of every lease at a window's end instead (self-preservation's).

    It runs in this process but on an event loop of its own, in a thread, of the kind the
    server runs on (uvloop when installed): how soon a waiting task gets its turn after the
    sweep yields depends on the loop's order of work. This process's own loop waits meanwhile.
    The registry has the server's listeners (journal, response cache, change feed), so each
    eviction costs here what it costs there. Logging is at
    STALL_LOG_LEVEL, as the benchmark runs its servers.
    """
    configure(level=STALL_LOG_LEVEL, fmt="json")
    return await asyncio.to_thread(_on_server_loop, leases, max_fraction, count)


def _on_server_loop(leases: int, max_fraction: float, count: bool) -> dict[str, Any]:
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(_sweep_watched(leases, max_fraction, count))


async def _sweep_watched(leases: int, max_fraction: float, count: bool) -> dict[str, Any]:
    """The sweep, with the loop's wake-up delays and the garbage collections during it."""
    clock = SystemClock()
    registry = Registry()
    long_ago = clock.wall_ms() - 200_000  # past the default 90 s lease
    for k in range(leases):
        registry.register(make(f"i-{k}", app=f"APP{k % STALL_APPS}"), now_ms=long_ago)
    preservation = SelfPreservation(enabled=False)
    journal = DeltaJournal(retention_ms=180_000)
    # The catalog is the feed's for watch streams' hashcodes: none here, so it is not told.
    feed = ChangeFeed(registry, clock, journal, Catalog(registry, max_age=30))
    for part in (journal, ResponseCache(max_age=30), feed):
        registry.subscribe(part)
    evictor = Evictor(registry, clock, preservation, interval=5, max_fraction=max_fraction)
    gc.collect()  # the set-up's garbage is not the sweep's
    gaps: list[float] = []
    done = asyncio.Event()
    monitor = asyncio.create_task(_monitor(gaps, done))
    await asyncio.sleep(0.01)  # the monitor is running
    with collections() as pauses:
        started = time.perf_counter()
        evicted = 0 if count else await evictor.sweep()
        if count:
            await evictor.end_window()
        seconds = time.perf_counter() - started
    done.set()
    await monitor
    stalls = [1000 * gap for gap in gaps]
    full = [ms for generation, ms in pauses if generation == 2]
    return {
        "leases": leases,
        "max_fraction": max_fraction,
        "evicted": evicted,
        "sweep_ms": round(1000 * seconds, 1),
        "longest_stall_ms": round(max(stalls), 2) if stalls else None,
        "p99_stall_ms": round(sorted(stalls)[int(0.99 * (len(stalls) - 1))], 2) if stalls else None,
        "wake_ups": len(stalls),
        # Python's own collector runs within the sweep too: its full collections walk the heap
        "full_collections": len(full),
        "longest_collection_ms": round(max(ms for _, ms in pauses), 2) if pauses else None,
        "log_level": STALL_LOG_LEVEL,
        "event_loop": loop_name(asyncio.get_running_loop()),
    }


async def _monitor(gaps: list[float], done: asyncio.Event) -> None:
    """Sleep MONITOR_SLEEP at a time until `done`; note how much later than asked each wake is."""
    for _ in range(MONITOR_MAX_TICKS):
        if done.is_set():
            return
        started = time.perf_counter()
        await asyncio.sleep(MONITOR_SLEEP)
        gaps.append(max(0.0, time.perf_counter() - started - MONITOR_SLEEP))
