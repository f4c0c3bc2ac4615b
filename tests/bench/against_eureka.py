"""The registry beside Spring Cloud's Eureka server, the server its users would replace with it:
the same workloads in one run, as ratios.

The Eureka server (tests/bench/eureka_server/, built with Maven) runs as its users run it: its
read-only response cache and 30 s intervals as they come, and in a second row with that cache
off, as the Spring docs suggest for faster propagation. Its JVM: processes.EUREKA_JVM, warmed
up by a heartbeat load before anything is measured. Each figure:

- registrations a second while `instances` register, 32 at a time, and the resident memory
  they added, per instance;
- heartbeats a second and CPU per heartbeat, runs alternating (scenarios.side_by_side);
- a full fetch (JSON) as cached, and right after a change; a delta; in milliseconds;
- register to visible: from a registration's answer until a reader polling the delta every
  50 ms sees it (a polling client adds its own interval, 30 s by default, to both);
- ready: from the spawn until the first fetch answers (Eureka's registry is then empty: it
  keeps nothing across a restart; ours restores its store, see the scale scenario);
- a pair of peered nodes: from a registration on one until the other shows the instance.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from tests.bench import processes, workloads
from tests.bench.scenarios import Plan, side_by_side
from tests.helpers import free_port
from tests.stock_clients.java import build, missing

EUREKA_SERVER = Path(__file__).parent / "eureka_server"
JAR = EUREKA_SERVER / "target" / "eureka-server.jar"
WARM_UP_SECONDS = 15.0  # of heartbeats into each JVM before anything is measured
VISIBLE_TIMEOUT = 40.0  # a cached Eureka shows a registration within its 30 s refresh
POLL = 0.05
SAMPLES = 20  # fetches timed per figure
VISIBLE_SAMPLES = 3  # registrations timed until visible (each may take 30 s on Eureka)
FIRST_NEW = 10_000_000  # instance numbers the timed registrations take, past any population


async def against_eureka(plan: Plan) -> dict[str, Any]:
    why = missing()
    if why is not None:
        return {"skipped": why}
    await asyncio.to_thread(build, EUREKA_SERVER)
    results: dict[str, Any] = {"jvm": " ".join(processes.EUREKA_JVM), "instances": plan.instances}
    async with (
        processes.registry(leases__eviction_interval=3600) as ours,
        processes.eureka_server(JAR) as cached,
        processes.eureka_server(JAR, read_only_cache=False) as uncached,
    ):
        servers = {"registry": ours, "eureka": cached, "eureka_cache_off": uncached}
        for name, server in servers.items():
            results[name] = {"ready_seconds": round(server.ready_seconds or 0, 2)}
            results[name].update(await populated(server, plan.instances))
        beat = workloads.heartbeats(plan.instances)
        spec = {"kind": "heartbeat", "instances": plan.instances}
        warm_up = 2.0 if plan.smoke else WARM_UP_SECONDS
        for server in (cached, uncached):  # the JIT's turn, unmeasured
            await plan.load.run(server.url, beat, warm_up, spec)
        heartbeats = await side_by_side(plan, ours, cached, beat, beat, spec, spec)
        results["heartbeat"] = {
            "registry_rps": heartbeats["registry"]["rps_median"],
            "eureka_rps": heartbeats["ceiling"]["rps_median"],
            "ratio": heartbeats["ratio"],
            "registry_cpu_us": heartbeats["registry"]["cpu_us_per_request"],
            "eureka_cpu_us": heartbeats["ceiling"]["cpu_us_per_request"],
            "cpu_ratio": heartbeats["cpu_ratio"],
        }
        samples, visible_samples = (3, 1) if plan.smoke else (SAMPLES, VISIBLE_SAMPLES)
        for n, (name, server) in enumerate(servers.items()):
            first = FIRST_NEW + 1000 * n
            results[name].update(await fetches(server, first, samples))
            results[name]["visible_ms"] = await visible(server, first + 500, visible_samples)
    results["pair"] = {
        "registry_ms": await pair_lag(None, samples),
        "eureka_ms": await pair_lag(JAR, samples),
    }
    return results


async def populated(server: processes.Server, count: int) -> dict[str, Any]:
    """Register `count` instances: how fast, and the memory they added per instance."""
    before = server.rss_bytes()
    started = time.perf_counter()
    await processes.populate(server, count)
    seconds = time.perf_counter() - started
    return {
        "registrations_per_second": round(count / seconds),
        "bytes_per_instance": round((server.rss_bytes() - before) / count),
    }


async def fetches(server: processes.Server, first: int, samples: int) -> dict[str, Any]:
    """Milliseconds for a full fetch as cached, one right after a change, and a delta."""
    timed: dict[str, list[float]] = {"full": [], "full_after_change": [], "delta": []}
    json = {"Accept": "application/json"}
    async with aiohttp.ClientSession() as session:

        async def get(path: str) -> float:
            started = time.perf_counter()
            async with session.get(server.url + path, headers=json) as response:
                await response.read()
                assert response.status == 200, response.status
            return 1000 * (time.perf_counter() - started)

        for k in range(samples):
            timed["full"].append(await get("/eureka/apps/"))
            timed["delta"].append(await get("/eureka/apps/delta"))
            await processes.register(session, server, *workloads.bench_instance(first + k))
            timed["full_after_change"].append(await get("/eureka/apps/"))
    return {f"{name}_ms": percentiles(values) for name, values in timed.items()}


async def visible(server: processes.Server, first: int, samples: int) -> list[float]:
    """Milliseconds from each registration's answer until the delta lists it."""
    found = []
    async with aiohttp.ClientSession() as session:
        for k in range(samples):
            app, iid, ip = workloads.bench_instance(first + k)
            await processes.register(session, server, app, iid, ip)
            started = time.perf_counter()
            found.append(round(1000 * await _until(session, server, iid, started), 1))
    return found


async def _until(
    session: aiohttp.ClientSession, server: processes.Server, iid: str, started: float
) -> float:
    needle = f'"instanceId":"{iid}"'.encode()
    while time.perf_counter() - started < VISIBLE_TIMEOUT:
        async with session.get(
            server.url + "/eureka/apps/delta", headers={"Accept": "application/json"}
        ) as response:
            if needle in await response.read():
                return time.perf_counter() - started
        await asyncio.sleep(POLL)
    return float("inf")


async def pair_lag(jar: Path | None, samples: int) -> dict[str, float | None]:
    """Milliseconds from a registration's answer on one of two peered nodes (ours, or Eureka's
    with `jar`) until the other answers GET apps/{app}/{id} with it (no cache on that read)."""
    lags: list[float] = []
    pair = (
        processes.cluster(2, leases__eviction_interval=3600) if jar is None else _eureka_pair(jar)
    )
    async with pair as (a, b), aiohttp.ClientSession() as session:
        for k in range(samples):
            app, iid, ip = workloads.bench_instance(FIRST_NEW + 5000 + k)
            await processes.register(session, a, app, iid, ip)
            started = time.perf_counter()
            while time.perf_counter() - started < VISIBLE_TIMEOUT:
                async with session.get(
                    f"{b.url}/eureka/apps/{app}/{iid}", headers={"Accept": "application/json"}
                ) as response:
                    if response.status == 200:
                        lags.append(1000 * (time.perf_counter() - started))
                        break
                await asyncio.sleep(0.005)
    return percentiles(lags)


@asynccontextmanager
async def _eureka_pair(jar: Path) -> AsyncIterator[list[processes.Server]]:
    """Two Eureka nodes, each the other's peer (under host names of their own)."""
    ports = [free_port(), free_port()]
    async with (
        processes.eureka_server(
            jar, ports[0], host="127.0.0.1", peer=f"http://localhost:{ports[1]}/eureka/"
        ) as a,
        processes.eureka_server(
            jar, ports[1], host="localhost", peer=f"http://127.0.0.1:{ports[0]}/eureka/"
        ) as b,
    ):
        yield [a, b]


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None}
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
    }


Row = tuple[str, str, str, str, str, str, str]


def eureka_rows(figure: dict[str, Any]) -> list[Row]:
    """The figures beside Eureka's, as rows of the benchmark's table (ratio: ours / Eureka's,
    or Eureka's / ours for times and memory, so that above 1 is better for us)."""
    if "skipped" in figure:
        return [("vs Eureka server", f"skipped: {figure['skipped']}", "", "", "", "", "")]
    ours, theirs, off = figure["registry"], figure["eureka"], figure["eureka_cache_off"]
    beat = figure["heartbeat"]

    def ms(values: dict[str, float | None]) -> str:
        return f"{values['p50']} / {values['p99']}"

    def row(label: str, mine: str, eurekas: str, ratio: float | None, cpu: str = "") -> Row:
        return (f"  {label}", mine, eurekas, "" if ratio is None else f"{ratio:.2f}", cpu, "", "")

    def faster(a: float | None, b: float | None) -> float | None:
        return None if not a or not b else b / a

    visible = {
        name: ", ".join(f"{v:.0f}" for v in side["visible_ms"])
        for name, side in (("ours", ours), ("theirs", theirs), ("off", off))
    }
    return [
        (
            f"vs Eureka server ({figure['instances']} instances; JVM {figure['jvm']}, warmed up)",
            "registry",
            "Eureka (cache off)",
            "ratio",
            "cpu ratio",
            "",
            "",
        ),
        row(
            "registrations/s",
            str(ours["registrations_per_second"]),
            f"{theirs['registrations_per_second']} ({off['registrations_per_second']})",
            ours["registrations_per_second"] / theirs["registrations_per_second"],
        ),
        row(
            "heartbeats/s, CPU us each",
            f"{beat['registry_rps']}, {beat['registry_cpu_us']}",
            f"{beat['eureka_rps']}, {beat['eureka_cpu_us']}",
            beat["ratio"],
            f"{beat['cpu_ratio']}",
        ),
        row(
            "full fetch JSON, ms p50 / p99",
            ms(ours["full_ms"]),
            f"{ms(theirs['full_ms'])} ({ms(off['full_ms'])})",
            faster(ours["full_ms"]["p50"], theirs["full_ms"]["p50"]),
        ),
        row(
            "  right after a change",
            ms(ours["full_after_change_ms"]),
            f"{ms(theirs['full_after_change_ms'])} ({ms(off['full_after_change_ms'])})",
            faster(ours["full_after_change_ms"]["p50"], theirs["full_after_change_ms"]["p50"]),
        ),
        row(
            "delta JSON, ms p50 / p99",
            ms(ours["delta_ms"]),
            f"{ms(theirs['delta_ms'])} ({ms(off['delta_ms'])})",
            faster(ours["delta_ms"]["p50"], theirs["delta_ms"]["p50"]),
        ),
        row(
            "register to visible in the delta, ms",
            visible["ours"],
            f"{visible['theirs']} ({visible['off']})",
            None,
        ),
        row(
            "memory per instance, B",
            str(ours["bytes_per_instance"]),
            f"{theirs['bytes_per_instance']} ({off['bytes_per_instance']})",
            faster(ours["bytes_per_instance"], theirs["bytes_per_instance"]),
        ),
        row(
            "ready from the spawn, s",
            str(ours["ready_seconds"]),
            f"{theirs['ready_seconds']} ({off['ready_seconds']}), empty",
            faster(ours["ready_seconds"], theirs["ready_seconds"]),
        ),
        row(
            "a pair: registered on one, on the other, ms p50 / p99",
            ms(figure["pair"]["registry_ms"]),
            ms(figure["pair"]["eureka_ms"]),
            faster(figure["pair"]["registry_ms"]["p50"], figure["pair"]["eureka_ms"]["p50"]),
        ),
    ]
