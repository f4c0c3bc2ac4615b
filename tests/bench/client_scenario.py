"""The client scenario: register-to-visible through `registry.client.DiscoveryClient`.

Hundreds of pure discovery clients, in a few processes of their own
(`tests.bench.client_watchers`), watch one registry while instances are registered one by one
from here; each registration's send is timed to each client's first sight of it through its
`changes()` iterator. Beside them a few unmodified py-eureka-client clients, in one more
process (`tests.bench.py_eureka_watchers`), see the same registrations by the stock way, a
delta fetch every 30 s, their phases spread over the interval.

The registry runs with its store off (it is not what is measured) and no fetch rate limit:
every client here comes from one address, and their start-up full fetches come together.
Everything shares the machine: the last client to see a change waits for the server's writes
to every stream and for every client of its process before it, so the p99 is about the CPU
that one change costs all of them, spread over the cores. The client processes collect their
start-up garbage before the registrations (as a process that has run a while), and count the
collections during them.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench import processes, workloads
from tests.bench.propagation import _cpu, _register_one_by_one, _sightings
from tests.bench.scenarios import Plan

P99_TARGET_MS = 50  # through the client, on a 2-core machine; judged outside smoke runs
START_TIMEOUT = 60.0  # for a process's clients to be watching (the stock ones' stagger aside)
DELIVERY_BOUND = 10.0  # seconds past the last registration before a client's sighting is missed
EXIT_TIMEOUT = 30.0  # for an observer process to write its figures and exit, past its bound

STOCK = "py-eureka-client"  # the stock clients' process, beside `clients-N`

Row = tuple[str, str, str, str, str, str, str]


@dataclass(frozen=True)
class Sizes:
    processes: int
    clients: int  # DiscoveryClients per process
    starting: int  # clients a process starts at once: the server's listen backlog is finite
    registrations: int
    gap: tuple[float, float]  # seconds between registrations, at random
    stock_clients: int  # py-eureka-client's
    stock_interval: float  # its fetch interval: 30 s by default, as Eureka's


FULL = Sizes(4, 50, 25, 20, (0.05, 0.15), 5, 30.0)
# Seconds, not minutes: few clients, and the stock clients fetching every second.
SMOKE = Sizes(2, 5, 5, 3, (0.05, 0.15), 2, 1.0)


async def client_figures(plan: Plan) -> dict[str, Any]:
    sizes = SMOKE if plan.smoke else FULL
    instances = [workloads.bench_instance(k) for k in range(sizes.registrations)]
    registering = sizes.registrations * sizes.gap[1]
    # Observers wait for `go` as long as the runner waits for the slowest to be ready
    go_timeout = START_TIMEOUT + sizes.stock_interval
    with tempfile.TemporaryDirectory(prefix="bench-clients-") as tmp:
        common = {"expected": [iid for _, iid, _ in instances], "go_timeout": go_timeout}
        specs: dict[str, tuple[str, dict[str, Any]]] = {
            f"clients-{p}": (
                "tests.bench.client_watchers",
                {
                    **common,
                    "clients": sizes.clients,
                    "starting": sizes.starting,
                    "seconds": registering + DELIVERY_BOUND,
                    "out": str(Path(tmp) / f"clients-{p}.json"),
                },
            )
            for p in range(sizes.processes)
        }
        specs[STOCK] = (
            "tests.bench.py_eureka_watchers",
            {
                "expected": [[app, iid] for app, iid, _ in instances],
                "go_timeout": go_timeout,
                "clients": sizes.stock_clients,
                "interval": sizes.stock_interval,
                "seconds": registering + 1.5 * sizes.stock_interval,
                "out": str(Path(tmp) / "py-eureka-client.json"),
            },
        )
        async with processes.registry(store__enabled=False, limits__fetch_rate_limit=0) as server:
            for _, spec in specs.values():
                spec["url"] = f"{server.url}/eureka/"
            sent, cpu = await _observed(server, specs, instances, sizes.gap, go_timeout)
        reports = {name: json.loads(Path(s["out"]).read_text()) for name, (_, s) in specs.items()}
    stock = reports.pop(STOCK)
    seen: dict[str, list[float]] = {iid: [] for iid in sent}
    for report in reports.values():
        for iid, times in report["seen"].items():
            seen[iid] += times
    totals: dict[str, int] = {}
    for report in reports.values():
        for name, value in report["stats"].items():
            totals[name] = totals.get(name, 0) + value
    return {
        "registrations": sizes.registrations,
        "gap_seconds": list(sizes.gap),
        "client": {
            **_sightings(seen, sent, observers=sizes.processes * sizes.clients),
            "processes": sizes.processes,
            "timed_out": sum(r["timed_out"] for r in reports.values()),
            "failures": [f for r in reports.values() for f in r["failures"]][:5],
            "modes_after": sorted({m for r in reports.values() for m in r["modes"]}),
            "stats": totals,
            # collections in the client processes while they watched: a full one stalls 50
            "gc": {
                "collections": sum(r["gc"]["collections"] for r in reports.values()),
                "full": sum(r["gc"]["full"] for r in reports.values()),
                "longest_ms": max(r["gc"]["longest_ms"] for r in reports.values()),
            },
        },
        "py_eureka_client": {
            **_sightings(stock["seen"], sent, observers=sizes.stock_clients),
            "interval_seconds": sizes.stock_interval,
            "timed_out": stock["timed_out"],
            **({"note": "smoke: the fetch interval cut from 30 s to 1 s"} if plan.smoke else {}),
        },
        # CPU per registration while they went out (the gaps included), to tell whose the delays are
        "cpu_ms_per_registration": {
            name: round(1000 * seconds / sizes.registrations, 1) for name, seconds in cpu.items()
        },
    }


async def _observed(
    server: processes.Server,
    specs: dict[str, tuple[str, dict[str, Any]]],
    instances: list[tuple[str, str, str]],
    gap: tuple[float, float],
    start_timeout: float,
) -> tuple[dict[str, float], dict[str, float]]:
    """Start every observer process, register once all are ready (and told to go), wait for
    them to finish.

    Returns when each registration was sent, and the CPU seconds the registry, the client
    processes together and the stock clients' process used while they went out.
    """
    started: dict[str, asyncio.subprocess.Process] = {}
    try:
        for name, (module, spec) in specs.items():
            started[name] = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                module,
                json.dumps(spec),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        async with asyncio.TaskGroup() as group:  # one failing stops the others' waits
            for name, process in started.items():
                group.create_task(_ready(name, process, start_timeout))
        for process in started.values():
            assert process.stdin is not None
            process.stdin.write(b"go\n")
            await process.stdin.drain()
        watched = {  # for their CPU figures
            "registry": [server],
            "clients": [processes.Server(p, "") for n, p in started.items() if n != STOCK],
            "py_eureka_client": [processes.Server(started[STOCK], "")],
        }
        before = {name: _total_cpu(group) for name, group in watched.items()}
        sent = await _register_one_by_one(server, instances, gap)
        cpu = {
            name: end - start
            for name, group in watched.items()
            if (start := before[name]) is not None and (end := _total_cpu(group)) is not None
        }
        for process in started.values():
            assert process.stdin is not None
            process.stdin.close()  # the observers may close their clients and write figures
        async with asyncio.TaskGroup() as group:
            for name, process in started.items():
                bound = float(specs[name][1]["seconds"]) + EXIT_TIMEOUT
                group.create_task(_finished(name, process, bound))
    finally:
        for process in started.values():
            if process.returncode is None:
                process.kill()
                await process.wait()
    return sent, cpu


async def _ready(name: str, process: asyncio.subprocess.Process, timeout: float) -> None:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), timeout)
    if line.strip() != b"ready":
        raise RuntimeError(f"the observers {name} did not start: {line[:200]!r}")


async def _finished(name: str, process: asyncio.subprocess.Process, timeout: float) -> None:
    await asyncio.wait_for(process.communicate(), timeout)
    if process.returncode != 0:
        raise RuntimeError(f"the observers {name} exited with {process.returncode}")


def _total_cpu(group: list[processes.Server]) -> float | None:
    """The processes' CPU seconds together; None once one has exited (done early)."""
    seconds = [_cpu(server) for server in group]
    return None if None in seconds else sum(s for s in seconds if s is not None)


def client_rows(figure: dict[str, Any], *, judged: bool) -> list[Row]:
    """Register-to-visible through the client beside its target, and the stock clients'."""
    ours, stock = figure["client"], figure["py_eureka_client"]
    good = ours["p99_ms"] is not None and ours["p99_ms"] <= P99_TARGET_MS and not ours["missed"]
    verdict = ("ok" if good else "ABOVE") if judged else "(smoke: not judged)"
    cpu = figure["cpu_ms_per_registration"]
    rows = []
    for label, seen, target in (
        (
            f"client: register-to-visible, {ours['observers']} DiscoveryClients "
            f"in {ours['processes']} processes",
            ours,
            f"p99 <= {P99_TARGET_MS} ms {verdict}",
        ),
        (
            f"  {stock['observers']} py-eureka-clients fetching every "
            f"{stock['interval_seconds']:g} s",
            stock,
            "",
        ),
    ):
        missed = f", {seen['missed']} missed" if seen["missed"] else ""
        rows.append(
            (
                label,
                f"{seen['sightings']} sightings of {figure['registrations']}, "
                f"max {seen['max_ms']} ms{missed}",
                "",
                "",
                "",
                f"{seen['p50_ms']} / {seen['p99_ms']}",
                target,
            )
        )
    collected = ours["gc"]
    rows.append(
        (
            "  CPU per registration",
            ", ".join(f"{name} {ms} ms" for name, ms in cpu.items()),
            "",
            "",
            "",
            "",
            f"clients' GCs: {collected['full']} full, longest {collected['longest_ms']} ms",
        )
    )
    return rows
