"""The scenarios: each measures the registry, and where a ceiling exists, the ceiling beside it."""

from __future__ import annotations

import asyncio
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

SCENARIOS = ("heartbeat", "fetch", "churn", "delta", "memory")
# The delta scenario's window, in seconds (Eureka's is 180).
DELTA_WINDOW = 3
FETCH_VARIANTS = {  # name: request headers
    "json": {"Accept": "application/json"},
    "json+gzip": {"Accept": "application/json", "Accept-Encoding": "gzip"},
    "xml": {"Accept": "application/xml"},
    "xml+gzip": {"Accept": "application/xml", "Accept-Encoding": "gzip"},
}


@dataclass
class Plan:
    instances: int
    memory_instances: int
    runs: int
    seconds: float
    load: LoadGenerator
    scenarios: frozenset[str] = frozenset(SCENARIOS)
    warm_up: bool = True


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
        async with processes.registry(eviction_interval=3600) as ours:
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
        eviction_interval=3600, delta_retention=DELTA_WINDOW, delta_cleanup_interval=1
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


async def memory(plan: Plan) -> dict[str, Any]:
    """Resident bytes per registered instance with default settings, before and after fetches.

    Read right after the registrations, while the delta journal still holds every one of them:
    the most the registry itself needs for them.
    """
    n = plan.memory_instances
    async with processes.registry(eviction_interval=3600) as server:
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
