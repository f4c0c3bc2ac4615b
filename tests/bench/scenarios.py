"""The scenarios: each measures the registry, and where a ceiling exists, the ceiling beside it."""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.bench import processes, workloads
from tests.bench.load import LoadGenerator, Result

SCENARIOS = (
    "heartbeat",
    "fetch",
    "churn",
    "delta",
    "replication",
    "memory",
    "propagation",
    "store",
    "scale",
    "client",
    "workers",
    "cluster",
    "eureka",
    "checks",
    "page",
    "join_stock",
)
# The delta scenario's window, in seconds (Eureka's is 180).
DELTA_WINDOW = 3
FETCH_VARIANTS = {  # name: request headers
    "json": {"Accept": "application/json"},
    "json+gzip": {"Accept": "application/json", "Accept-Encoding": "gzip"},
    "xml": {"Accept": "application/xml"},
    "xml+gzip": {"Accept": "application/xml", "Accept-Encoding": "gzip"},
}
# The replication scenario: nodes A, B and C, with default replication settings. A takes a
# steady load of heartbeats, about STEADY_CONNECTIONS x 1000 / (STEADY_DELAY_MS + latency) a
# second, while single changes on A are timed until B and C show them.
PEER_NAMES = ("B", "C")
STEADY_CONNECTIONS = 10  # about 5 000 heartbeats a second into A
STEADY_DELAY_MS = 1
LAG_SAMPLE_SECONDS = 0.06  # the steady load lasts about this long per change to time
LAG_POLL = 0.002  # seconds between reads of a peer while waiting for a change
LAG_TIMEOUT = 5.0  # a change a peer has not shown by then counts as missed
LAG_GAP = 0.02  # at most this long, at random, between changes: no lock-step with the batches
REPLICA_TIMEOUT = 60.0  # for B and C to hold the whole population
DRAIN_TIMEOUT = 10.0  # for A's replication queues to empty after a load
PEER_FIGURES = (
    "sent",
    "batches",
    "droppedHeartbeats",
    "dropped",
    "failed",
    "retried",
    "reregistered",
    "adopted",
)


@dataclass
class Plan:
    instances: int
    memory_instances: int
    runs: int
    seconds: float
    load: LoadGenerator
    scenarios: frozenset[str] = frozenset(SCENARIOS)
    warm_up: bool = True
    lag_samples: int = 200  # changes the replication scenario times
    smoke: bool = False  # scenarios that cannot scale by the figures above pick smaller sizes
    scale_instances: int = 100_000  # the scale scenario's registry
    scale_apps: int = 500
    scale_seconds: float = 30.0  # of its mixed workload
    registry_code: Path | None = None  # join_stock's node from this checkout, else this one's


@dataclass
class Series:
    """One figure measured over several runs."""

    results: list[Result] = field(default_factory=list)
    cpu_us_per_request: list[float] = field(default_factory=list)  # the server's own CPU

    def median(self, attribute: str = "rps") -> float:
        return statistics.median(getattr(r, attribute) for r in self.results)

    def spread(self, attribute: str = "rps") -> tuple[float, float]:
        values = [getattr(r, attribute) for r in self.results]
        return min(values), max(values)

    def errors(self) -> int:
        return sum(r.errors for r in self.results)

    def summary(self) -> dict[str, Any]:
        low, high = self.spread()
        return {
            "rps_median": round(self.median()),
            "rps_min": round(low),
            "rps_max": round(high),
            "p50_ms_median": round(self.median("p50_ms"), 3),
            "p99_ms_median": round(self.median("p99_ms"), 3),
            "errors": self.errors(),
            "runs": len(self.results),
        }


def compared(ours: Series, ceiling: Series) -> dict[str, Any]:
    """Both series, and the median of the per-run ratios (runs alternate, so pairs share noise).

    `cpu_ratio` compares the servers' own CPU time per request (ceiling / registry): less
    moved than throughput by what else the machine runs, so it tells small changes apart.
    """
    ratios = [o.rps / c.rps for o, c in zip(ours.results, ceiling.results, strict=True) if c.rps]
    cpu = [
        c / o for o, c in zip(ours.cpu_us_per_request, ceiling.cpu_us_per_request, strict=True) if o
    ]
    return {
        "registry": {**ours.summary(), "cpu_us_per_request": _median(ours.cpu_us_per_request)},
        "ceiling": {**ceiling.summary(), "cpu_us_per_request": _median(ceiling.cpu_us_per_request)},
        "ratio": round(statistics.median(ratios), 3) if ratios else None,
        "cpu_ratio": round(statistics.median(cpu), 3) if cpu else None,
    }


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


async def measured(
    plan: Plan, server: processes.Server, workload: workloads.Workload, spec: dict[str, object]
) -> tuple[Result, float]:
    """One run, and the server's CPU microseconds per request during it."""
    before = server.cpu_seconds()
    result = await plan.load.run(server.url, workload, plan.seconds, spec)
    used = server.cpu_seconds() - before
    return result, 1e6 * used / result.requests if result.requests else 0.0


async def side_by_side(
    plan: Plan,
    ours: processes.Server,
    theirs: processes.Server,
    workload: workloads.Workload,
    ceiling_workload: workloads.Workload,
    spec: dict[str, object],
    ceiling_spec: dict[str, object],
) -> dict[str, Any]:
    if plan.warm_up:  # one short unmeasured run each, so neither side is measured cold
        await plan.load.run(ours.url, workload, 1, spec)
        await plan.load.run(theirs.url, ceiling_workload, 1, ceiling_spec)
    mine, ceiling = Series(), Series()
    sides = [(mine, ours, workload, spec), (ceiling, theirs, ceiling_workload, ceiling_spec)]
    for run in range(plan.runs):
        # Who goes first alternates, so drift within a run favours neither side.
        for series, server, load, load_spec in sides if run % 2 == 0 else sides[::-1]:
            result, cpu = await measured(plan, server, load, load_spec)
            series.results.append(result)
            series.cpu_us_per_request.append(cpu)
    return compared(mine, ceiling)


async def fetch_every_variant(server: processes.Server) -> dict[str, tuple[bytes, dict[str, str]]]:
    """Each full-fetch variant's exact bytes, with the headers that describe them."""
    answers = {}
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for name, headers in FETCH_VARIANTS.items():
            async with session.get(
                f"{server.url}/eureka/apps/",
                headers=headers,
                skip_auto_headers=["Accept-Encoding"],  # only the variant's own headers
            ) as response:
                body = await response.read()
                kept = {
                    k: response.headers[k]
                    for k in ("Content-Type", "Content-Encoding")
                    if k in response.headers
                }
            answers[name] = (body, kept)
    return answers


async def fetch_payloads(server: processes.Server, directory: Path) -> dict[str, int]:
    """Save the registry's full-fetch answers as the ceiling's precomputed bytes."""
    sizes = {}
    for name, (body, headers) in (await fetch_every_variant(server)).items():
        (directory / f"{name}.body").write_bytes(body)
        (directory / f"{name}.json").write_bytes(orjson.dumps(headers))
        sizes[name] = len(body)
    return sizes


async def throughput(plan: Plan) -> dict[str, Any]:
    """Heartbeats and full fetches of `plan.instances`, each beside its ceiling; churn; delta."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-payloads-") as tmp:
        payload_dir = Path(tmp)
        async with processes.registry(leases__eviction_interval=3600) as ours:
            await processes.populate(ours, plan.instances)
            results["payload_bytes"] = await fetch_payloads(ours, payload_dir)
            async with processes.ceiling(payload_dir) as theirs:
                if "heartbeat" in plan.scenarios:
                    beat = workloads.heartbeats(plan.instances)
                    spec = {"kind": "heartbeat", "instances": plan.instances}
                    results["heartbeat"] = await side_by_side(
                        plan, ours, theirs, beat, beat, spec, spec
                    )
                for name, headers in FETCH_VARIANTS.items():
                    if "fetch" not in plan.scenarios:
                        break
                    fetch = workloads.gets("/eureka/apps/", headers, f"fetch-{name}")
                    bytes_ = workloads.gets(f"/payload/{name}", headers, f"ceiling-{name}")
                    results[f"full_fetch_{name}"] = await side_by_side(
                        plan,
                        ours,
                        theirs,
                        fetch,
                        bytes_,
                        {"kind": "get", "path": "/eureka/apps/", "headers": headers},
                        {"kind": "get", "path": f"/payload/{name}", "headers": headers},
                    )
                if "fetch" in plan.scenarios:
                    results["full_fetch_after_a_change"] = await rebuild_after_change(plan, ours)
            if "churn" in plan.scenarios:
                results["churn"] = await churn(plan, ours)
    if "delta" in plan.scenarios:
        results["delta_under_churn"] = await delta_under_churn(plan)
    return results


async def rebuild_after_change(plan: Plan, server: processes.Server) -> dict[str, Any]:
    """Milliseconds for a full fetch that must rebuild the document (a change came first).

    The throughput figures above measure cached documents; this is what the first client
    after each change waits for.
    """
    timings: dict[str, list[float]] = {"json": [], "xml": []}
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for round_ in range(max(3, plan.runs)):
            for name in timings:
                app, iid, ip = workloads.bench_instance(plan.instances + round_)
                body = orjson.dumps(workloads.instance_body(app, iid, ip))
                headers = {"Content-Type": "application/json"}
                async with session.post(
                    f"{server.url}/eureka/apps/{app}", data=body, headers=headers
                ):
                    pass
                started = time.perf_counter()
                async with session.get(
                    f"{server.url}/eureka/apps/",
                    headers=FETCH_VARIANTS[name],
                    skip_auto_headers=["Accept-Encoding"],
                ) as response:
                    await response.read()
                timings[name].append(1000 * (time.perf_counter() - started))
    return {f"{name}_ms_median": round(statistics.median(t), 1) for name, t in timings.items()}


async def churn(plan: Plan, server: processes.Server) -> dict[str, Any]:
    """Registrations of new instances alternating with cancels of earlier ones."""
    series = Series()
    for _ in range(plan.runs):
        series.results.append(
            await plan.load.run(server.url, workloads.churn(), plan.seconds, {"kind": "churn"})
        )
    return series.summary()


async def delta_under_churn(plan: Plan) -> dict[str, Any]:
    """JSON delta fetches of a populated registry while another process churns instances.

    The delta window is scaled down to DELTA_WINDOW seconds so that, after waiting it out, the
    delta holds only the churn of the run (as a 3-minute window holds a few minutes of deploys),
    not the population itself.
    """
    async with processes.registry(
        leases__eviction_interval=3600,
        reads__delta_retention=DELTA_WINDOW,
        reads__delta_cleanup_interval=1,
    ) as server:
        await processes.populate(server, plan.instances)
        await asyncio.sleep(DELTA_WINDOW + 1)  # the population leaves the delta window
        churner = LoadGenerator(connections=1, prefer_wrk=False)
        delta = workloads.gets("/eureka/apps/delta", {"Accept": "application/json"}, "delta")
        spec = {"kind": "get", "path": "/eureka/apps/delta", "headers": delta.headers}
        fetches, churned = Series(), Series()
        for _ in range(plan.runs):
            background = asyncio.create_task(
                churner.run(server.url, workloads.churn(), plan.seconds, {"kind": "churn"})
            )
            fetches.results.append(await plan.load.run(server.url, delta, plan.seconds, spec))
            churned.results.append(await background)
    return {
        **fetches.summary(),
        "churn_rps_median": round(churned.median()),
        "delta_window_seconds": DELTA_WINDOW,
    }


async def replication(plan: Plan) -> dict[str, Any]:
    """Three nodes, A, B and C, replicating to each other with the default settings.

    First the lag: while A takes a steady load of heartbeats, single changes on A (an override
    set, then deleted again) are timed until B and C show them; then again at half the load.
    Then A's heartbeat throughput, replicating to both, beside a node with no peers, runs
    alternating as in the heartbeat scenario. Each replicating run ends when A's queues are
    empty, so the catch-up neither competes with the next run nor escapes A's and the peers'
    CPU figures.
    """
    n = plan.instances
    async with (
        processes.cluster(1 + len(PEER_NAMES), leases__eviction_interval=3600) as (a, *peers),
        processes.registry(leases__eviction_interval=3600) as alone,
    ):
        await processes.populate(a, n)
        started = time.monotonic()
        async with aiohttp.ClientSession() as session:
            while min([await _registry_size(session, peer) for peer in peers]) < n:
                if time.monotonic() - started > REPLICA_TIMEOUT:
                    raise RuntimeError(f"B and C did not hold {n} instances in {REPLICA_TIMEOUT} s")
                await asyncio.sleep(processes.POLL)
            replicated = time.monotonic() - started
            await processes.populate(alone, n)
            lag = await replication_lag(plan, session, a, peers)
            # the same at half the load: where the lag stands while A's loop has room to spare
            half_load = await replication_lag(plan, session, a, peers, STEADY_CONNECTIONS // 2)
            runs = await beside_standalone(plan, session, a, peers, alone)
            named = dict(zip(PEER_NAMES, peers, strict=True))
            names = {f"{peer.url}/eureka/": name for name, peer in named.items()}
            queues = {
                names.get(p["url"], p["url"]): {key: p[key] for key in PEER_FIGURES}
                for p in (await _status(session, a))["peers"]
            }
            sizes = {name: await _registry_size(session, p) for name, p in named.items()}
    return {
        **runs,
        "lag": lag,
        "lag_at_half_load": half_load,
        "instances": n,
        "population_replicated_seconds": round(replicated, 2),
        "peer_registry_sizes": sizes,
        "queues": queues,  # A's own figures for each peer, at the end
    }


async def replication_lag(
    plan: Plan,
    session: aiohttp.ClientSession,
    a: processes.Server,
    peers: list[processes.Server],
    connections: int = STEADY_CONNECTIONS,
) -> dict[str, Any]:
    """Milliseconds from a change's request to A until B, and C, answer the change, while
    `connections` pace heartbeats into A; and how busy that keeps A (`sender_cores`: A's CPU
    seconds per second, where its one event loop can use one core at most).

    Each peer is read every LAG_POLL seconds by its own task. The changes alternate: an
    OUT_OF_SERVICE override on a random instance, then its deletion (back to UP).
    """
    steady = LoadGenerator(connections=connections, prefer_wrk=plan.load.wrk is not None)
    beat = workloads.paced(workloads.heartbeats(plan.instances), STEADY_DELAY_MS)
    spec = {"kind": "heartbeat", "instances": plan.instances, "delay_ms": STEADY_DELAY_MS}
    seconds = max(2, round(1 + plan.lag_samples * LAG_SAMPLE_SECONDS))
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    cpu_before, started_at = a.cpu_seconds(), loop.time()
    load = asyncio.create_task(steady.run(a.url, beat, seconds, spec))
    await asyncio.sleep(0.5)  # the load and the replication it causes are under way
    lags: dict[str, list[float]] = {name: [] for name in PEER_NAMES}
    missed = dict.fromkeys(PEER_NAMES, 0)
    rng = random.Random(1)
    overridden: str | None = None  # the path of the instance whose override is in force
    changes = 0
    while changes < plan.lag_samples and loop.time() < end - 0.5 and not load.done():
        if overridden is None:
            app, iid, _ = workloads.bench_instance(rng.randrange(plan.instances))
            path, method, value = f"/eureka/apps/{app}/{iid}", "PUT", "OUT_OF_SERVICE"
        else:
            path, method, value = overridden, "DELETE", "UP"
        started = time.perf_counter()
        async with session.request(method, f"{a.url}{path}/status?value={value}") as response:
            if response.status != 200:
                raise RuntimeError(f"{method} {path}/status on A answered {response.status}")
        seen = await asyncio.gather(
            *(_until_shown(session, peer, path, value, started) for peer in peers)
        )
        for name, lag in zip(PEER_NAMES, seen, strict=True):
            if lag is None:
                missed[name] += 1
            else:
                lags[name].append(lag)
        overridden = path if overridden is None else None
        changes += 1
        await asyncio.sleep(rng.uniform(0, LAG_GAP))
    if overridden is not None:  # leave every instance as it was
        async with session.delete(f"{a.url}{overridden}/status?value=UP"):
            pass
    result = await load
    busy = (a.cpu_seconds() - cpu_before) / (loop.time() - started_at)
    return {
        "heartbeat_rps": round(result.rps),
        "sender_cores": round(busy, 2),
        "heartbeat_errors": result.errors,
        "changes": changes,
        **{
            name: {
                "p50_ms": _percentile(values, 0.50),
                "p99_ms": _percentile(values, 0.99),
                "max_ms": _percentile(values, 1.0),
                "missed": missed[name],
            }
            for name, values in lags.items()
        },
    }


async def _until_shown(
    session: aiohttp.ClientSession, peer: processes.Server, path: str, status: str, since: float
) -> float | None:
    """Milliseconds from `since` until `peer` answers the instance at `path` with `status`."""
    url = f"{peer.url}{path}"
    while True:
        async with session.get(url, headers={"Accept": "application/json"}) as response:
            body = await response.read()
        now = time.perf_counter()
        if response.status == 200 and orjson.loads(body)["instance"]["status"] == status:
            return 1000 * (now - since)
        if now - since > LAG_TIMEOUT:
            return None
        await asyncio.sleep(LAG_POLL)


async def beside_standalone(
    plan: Plan,
    session: aiohttp.ClientSession,
    a: processes.Server,
    peers: list[processes.Server],
    alone: processes.Server,
) -> dict[str, Any]:
    """Saturating heartbeats on A (replicating) and on a node with no peers, runs alternating."""
    beat = workloads.heartbeats(plan.instances)
    spec = {"kind": "heartbeat", "instances": plan.instances}
    if plan.warm_up:
        for server in (a, alone):
            await plan.load.run(server.url, beat, 1, spec)
            await _drained(session, server)
    replicating, standalone = Series(), Series()
    peer_cpu: list[float] = []  # seconds, B and C together, per replicating run
    drains: list[float] = []
    sides = [(replicating, a), (standalone, alone)]
    for run in range(plan.runs):
        for series, server in sides if run % 2 == 0 else sides[::-1]:
            before, peers_before = server.cpu_seconds(), sum(p.cpu_seconds() for p in peers)
            result = await plan.load.run(server.url, beat, plan.seconds, spec)
            drain = await _drained(session, server)  # nothing to wait for without peers
            used = server.cpu_seconds() - before
            series.results.append(result)
            series.cpu_us_per_request.append(1e6 * used / result.requests if result.requests else 0)
            if server is a:
                drains.append(drain)
                peer_cpu.append(sum(p.cpu_seconds() for p in peers) - peers_before)
    figures = compared(replicating, standalone)
    heartbeats = [r.requests for r in replicating.results]
    return {
        "replicating": figures["registry"],
        "standalone": figures["ceiling"],
        "ratio": figures["ratio"],  # replicating / standalone
        "cpu_ratio": figures["cpu_ratio"],  # standalone / replicating CPU per heartbeat on A
        "peer_cpu_seconds": _median(peer_cpu),
        "peer_cpu_us_per_heartbeat": _median(
            [1e6 * cpu / count for cpu, count in zip(peer_cpu, heartbeats, strict=True) if count]
        ),
        "drain_seconds_max": round(max(drains), 2) if drains else None,
    }


async def _drained(session: aiohttp.ClientSession, server: processes.Server) -> float:
    """Seconds until `server` owes its peers nothing (at most DRAIN_TIMEOUT)."""
    started = time.monotonic()
    while any(p["queueDepth"] for p in (await _status(session, server))["peers"]):
        if time.monotonic() - started > DRAIN_TIMEOUT:
            break
        await asyncio.sleep(processes.POLL)
    return time.monotonic() - started


async def _status(session: aiohttp.ClientSession, server: processes.Server) -> dict[str, Any]:
    async with session.get(
        f"{server.url}/eureka/status", headers={"Accept": "application/json"}
    ) as response:
        document: dict[str, Any] = orjson.loads(await response.read())
    return document


async def _registry_size(session: aiohttp.ClientSession, server: processes.Server) -> int:
    return int((await _status(session, server))["generalStats"]["registry-size"])


def _percentile(values: list[float], p: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 1) if ordered else None


async def memory(plan: Plan) -> dict[str, Any]:
    """Resident bytes per registered instance with default settings, before and after fetches.

    Read right after the registrations, while the delta journal still holds every one of them:
    the most the registry itself needs for them.
    """
    n = plan.memory_instances
    async with processes.registry(leases__eviction_interval=3600) as server:
        base = server.rss_bytes()
        await processes.populate(server, n)
        registered = server.rss_bytes()
        sizes = {name: len(body) for name, (body, _) in (await fetch_every_variant(server)).items()}
        fetched = server.rss_bytes()
    return {
        "instances": n,
        "bytes_per_instance": round((registered - base) / n),
        "bytes_per_instance_after_fetches": round((fetched - base) / n),
        "cached_payload_bytes_per_instance": round(sum(sizes.values()) / n),
        "payload_bytes": sizes,
    }
