"""The benchmark runner: `python -m tests.bench [--smoke]`.

Starts the registry as a subprocess on loopback, loads it from other processes (wrk when
installed, else a Python load generator), measures each scenario over several runs beside a
bare aiohttp ceiling where one exists, prints a table and writes the figures as JSON.
It installs nothing; it says which load generator and event loop it used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from registry.__main__ import loop_name, new_event_loop
from tests.bench.against_eureka import against_eureka, eureka_rows
from tests.bench.checks import checks, checks_rows
from tests.bench.client_scenario import client_figures, client_rows
from tests.bench.cluster import cluster
from tests.bench.cluster_report import cluster_rows
from tests.bench.join_stock import join_stock, join_stock_rows
from tests.bench.load import LoadGenerator
from tests.bench.page import page, page_rows
from tests.bench.propagation import propagation
from tests.bench.scale import scale
from tests.bench.scale_report import Row, scale_rows
from tests.bench.scenarios import SCENARIOS, Plan, memory, replication, throughput
from tests.bench.store import store
from tests.bench.workers import workers

TARGETS = {  # figure: (minimum ratio to the ceiling, or maximum bytes)
    "heartbeat": 0.95,
    "replicating": 0.85,  # heartbeats replicating to two peers / without peers
    "full_fetch": 0.90,
    "bytes_per_instance": 1600,
}
LAG_P99_MS = 50  # replication lag at about 5 000 heartbeats a second into the sender
# Register to visible, p99 in milliseconds, by kind of observer.
VISIBLE_P99_MS = {"watch": 20, "long_poll": 30}
# A crashed instance goes within its lease plus one eviction interval, plus this for delivery.
EVICTION_SLACK = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a few seconds: proves it works")
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--memory-instances", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--python-load", action="store_true", help="use the Python generator")
    parser.add_argument("--scale-instances", type=int, default=100_000)
    parser.add_argument("--scale-apps", type=int, default=500)
    parser.add_argument("--scale-seconds", type=float, default=30.0, help="of the mixed load")
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"a comma-separated subset of {','.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--registry-code",
        type=Path,
        help="join_stock's joining node runs the registry of this checkout (a release before)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-results.json"))
    args = parser.parse_args()
    if args.smoke:
        args.instances, args.memory_instances, args.runs, args.seconds = 200, 2_000, 1, 1.0
        args.connections = 8
        args.scale_instances, args.scale_apps, args.scale_seconds = 2_000, 20, 5.0

    load = LoadGenerator(connections=args.connections, prefer_wrk=not args.python_load)
    chosen = frozenset(args.scenarios.split(","))
    if not chosen <= set(SCENARIOS):
        parser.error(f"unknown scenarios: {', '.join(sorted(chosen - set(SCENARIOS)))}")
    plan = Plan(
        args.instances,
        args.memory_instances,
        args.runs,
        args.seconds,
        load,
        chosen,
        warm_up=not args.smoke,
        lag_samples=20 if args.smoke else 200,
        smoke=args.smoke,
        scale_instances=args.scale_instances,
        scale_apps=args.scale_apps,
        scale_seconds=args.scale_seconds,
        registry_code=args.registry_code,
    )
    machine = describe_machine(load)
    print(
        f"load generator: {machine['load_generator']}; event loop: {machine['event_loop']}; "
        f"{machine['cpus']} CPUs ({machine['cpu']})",
        flush=True,
    )
    if load.wrk is None and not args.python_load:
        print("wrk not found: install Debian's wrk for figures closer to the ceiling", flush=True)

    started = time.monotonic()
    results = asyncio.run(run(plan))
    report = {
        "machine": machine,
        "parameters": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "results": results,
        "seconds": round(time.monotonic() - started, 1),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(results, judged=not args.smoke, load_generator=load.name))
    print(f"\nfigures written to {args.out} in {report['seconds']} s")
    return 0


async def run(plan: Plan) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if plan.scenarios & {"heartbeat", "fetch", "churn", "delta"}:
        results = await throughput(plan)
    if "replication" in plan.scenarios:
        results["replication"] = await replication(plan)
    if "memory" in plan.scenarios:
        results["memory"] = await memory(plan)
    if "propagation" in plan.scenarios:
        results["propagation"] = await propagation(plan)
    if "store" in plan.scenarios:
        results["store"] = await store(plan)
    if "scale" in plan.scenarios:
        results["scale"] = await scale(plan)
    if "client" in plan.scenarios:
        results["client"] = await client_figures(plan)
    if "workers" in plan.scenarios:
        results["workers"] = await workers(plan)
    if "cluster" in plan.scenarios:
        results["cluster"] = await cluster(plan)
    if "eureka" in plan.scenarios:
        results["eureka"] = await against_eureka(plan)
    if "checks" in plan.scenarios:
        results["checks"] = await checks(plan)
    if "page" in plan.scenarios:
        results["page"] = await page(plan)
    if "join_stock" in plan.scenarios:
        results["join_stock"] = await join_stock(plan)
    return results


def describe_machine(load: LoadGenerator) -> dict[str, Any]:
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    probe = new_event_loop()  # the kind both servers will run on
    loop = loop_name(probe)
    probe.close()
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "event_loop": loop,
        "load_generator": load.name,
    }


def table(results: dict[str, Any], *, judged: bool = True, load_generator: str = "wrk") -> str:
    """The figures as text; with `judged`, each beside its target (smoke runs are not judged;
    nor is a ratio to a ceiling that `load_generator` was not wrk for)."""
    rows = [("scenario", "registry", "ceiling", "ratio", "cpu ratio", "p50 / p99 ms", "target")]
    for name, figure in results.items():
        if not isinstance(figure, dict) or "ceiling" not in figure:
            continue
        ours, ceiling = figure["registry"], figure["ceiling"]
        target = TARGETS["heartbeat" if name == "heartbeat" else "full_fetch"]
        verdict = ratio_verdict(figure, target, judged=judged, load_generator=load_generator)
        rows.append(_beside(name, ours, _rps(ceiling), figure, f">= {target} {verdict}"))
    for name in ("churn", "delta_under_churn"):
        if name not in results:
            continue
        figure = results[name]
        extra = f" (churn {figure['churn_rps_median']}/s)" if "churn_rps_median" in figure else ""
        rows.append(_row(name + extra, _rps(figure), timing=_timing(figure)))
    if "full_fetch_after_a_change" in results:
        rebuild = results["full_fetch_after_a_change"]
        rows.append(
            _row(
                "full fetch after a change",
                f"json {rebuild['json_ms_median']} ms, xml {rebuild['xml_ms_median']} ms",
            )
        )
    if "replication" in results:
        rows.extend(_replication_rows(results["replication"], judged, load_generator))
    if "workers" in results:
        rows.extend(_workers_rows(results["workers"]))
    if "propagation" in results:
        rows.extend(_propagation_rows(results["propagation"], judged=judged))
    if "store" in results:
        rows.extend(_store_rows(results["store"]))
    if "scale" in results:
        rows.extend(scale_rows(results["scale"], judged=judged))
    if "client" in results:
        rows.extend(client_rows(results["client"], judged=judged))
    if "cluster" in results:
        rows.extend(cluster_rows(results["cluster"], judged=judged))
    if "eureka" in results:
        rows.extend(eureka_rows(results["eureka"]))
    if "checks" in results:
        rows.extend(checks_rows(results["checks"]))
    if "page" in results:
        rows.extend(page_rows(results["page"]))
    if "join_stock" in results:
        rows.extend(join_stock_rows(results["join_stock"]))
    if "memory" not in results:
        return _render(rows)
    mem = results["memory"]
    limit = TARGETS["bytes_per_instance"]
    verdict = "ok" if mem["bytes_per_instance"] <= limit else "ABOVE"
    verdict = verdict if judged else "(smoke: not judged)"
    for label, value, target in (
        (
            f"memory at {mem['instances']} instances",
            mem["bytes_per_instance"],
            f"<= {limit} {verdict}",
        ),
        ("  after JSON and XML fetches", mem["bytes_per_instance_after_fetches"], ""),
        ("  of which cached payloads", mem["cached_payload_bytes_per_instance"], ""),
    ):
        rows.append(_row(label, f"{value} B/inst", target=target))
    return _render(rows)


def _replication_rows(figure: dict[str, Any], judged: bool, load_generator: str) -> list[Row]:
    """A's heartbeats replicating to B and C beside a node without peers; B's and C's lag."""
    ours, alone, lag = figure["replicating"], figure["standalone"], figure["lag"]
    target = TARGETS["replicating"]
    verdict = ratio_verdict(figure, target, judged=judged, load_generator=load_generator)
    rows = [
        _beside(
            "heartbeat replicating to 2 peers",
            ours,
            f"no peers: {_rps(alone)}",
            figure,
            f">= {target} {verdict}",
        ),
        _row(
            "  peers' CPU (B + C)",
            f"{figure['peer_cpu_seconds']} s/run, {figure['peer_cpu_us_per_heartbeat']} us/hb",
        ),
    ]
    for load, judge in ((lag, True), (figure["lag_at_half_load"], False)):
        for name in ("B", "C"):
            peer = load[name]
            missed = f", {peer['missed']} missed" if peer["missed"] else ""
            met = peer["p99_ms"] <= LAG_P99_MS and not peer["missed"]
            rows.append(
                _row(
                    f"{'replication lag' if judge else '  at half the load'} A->{name} "
                    f"(at {load['heartbeat_rps']} hb/s, A {load['sender_cores']} of a core)",
                    f"{load['changes'] - peer['missed']} changes{missed}, max {peer['max_ms']} ms",
                    timing=f"{peer['p50_ms']} / {peer['p99_ms']}",
                    target=f"p99 <= {LAG_P99_MS} ms " + _verdict(met, judged, "ABOVE")
                    if judge
                    else "",
                )
            )
    return rows


def _workers_rows(figure: dict[str, Any]) -> list[Row]:
    """Two peered processes sharing the load beside one process with all of it."""
    two, one = figure["two_workers"], figure["one_worker"]
    return [
        _beside("heartbeat, 2 peered workers (both loaded)", two, f"1 worker: {_rps(one)}", figure)
    ]


def ratio_verdict(
    figure: dict[str, Any], target: float, *, judged: bool, load_generator: str
) -> str:
    """A ratio of two series measured by one load generator, against its target. Judged only
    when wrk made it: the Python generator cannot saturate either server, so both meet its own
    ceiling and the ratio drifts toward 1. Never judged "ok" over a series with errors or
    refusals, whose speed says nothing of the work asked for."""
    if not judged:
        return "(smoke: not judged)"
    if load_generator != "wrk":
        return "(python load: not judged)"
    sides = ("registry", "ceiling", "replicating", "standalone")
    if any(figure[side]["errors"] for side in sides if side in figure):
        return "ERRORS"
    return "ok" if (figure["ratio"] or 0) >= target else "BELOW"


def _verdict(met: bool, judged: bool, otherwise: str) -> str:
    if not judged:
        return "(smoke: not judged)"
    return "ok" if met else otherwise


def _propagation_rows(figure: dict[str, Any], *, judged: bool) -> list[Row]:
    """Crash to eviction beside its bound; register to visible by kind of client; sweep stalls."""
    crash, visible = figure["crash_to_evicted"], figure["register_to_visible"]
    interval, lease = crash["eviction_interval_seconds"], crash["lease_seconds"]
    bound = interval + EVICTION_SLACK
    worst = crash["over_lease_max_seconds"]
    verdict = "ok" if worst is not None and worst <= bound and not crash["missed"] else "LATE"
    missed = f", {crash['missed']} missed" if crash["missed"] else ""
    rows = [
        _row(
            f"crash-to-evicted ({crash['instances']} crashes, lease {lease} s, "
            f"sweeps {interval:g} s)",
            f"lease + {crash['over_lease_median_seconds']} s median, + {worst} s max{missed}",
            target=f"<= lease + {bound:g} s {verdict if judged else '(smoke: not judged)'}",
        )
    ]
    for kind, label in (
        ("watch", f"register-to-visible: {visible['watch']['observers']} watch streams"),
        ("long_poll", f"  {visible['long_poll']['observers']} long-polls"),
        (
            "poll",
            f"  {visible['poll']['observers']} stock clients polling delta every "
            f"{visible['poll']['interval_seconds']:g} s",
        ),
    ):
        seen = visible[kind]
        missed = f", {seen['missed']} missed" if seen["missed"] else ""
        target = VISIBLE_P99_MS.get(kind)
        verdict = ""
        if target is not None:
            met = seen["p99_ms"] is not None and seen["p99_ms"] <= target and not seen["missed"]
            verdict = f"p99 <= {target} ms " + (
                ("ok" if met else "ABOVE") if judged else "(smoke: not judged)"
            )
        rows.append(
            _row(
                label,
                f"{seen['sightings']} sightings of {visible['registrations']}, "
                f"max {seen['max_ms']} ms{missed}",
                timing=f"{seen['p50_ms']} / {seen['p99_ms']}",
                target=verdict,
            )
        )
        if kind == "watch":
            server = seen["server"]
            rows.append(
                _row(
                    "  the registry's side: change to last write",
                    f"{server['frames']} fan-outs, mean {server['mean_ms']} ms",
                    timing=f"<= {server['p50_le_ms']} / <= {server['p99_le_ms']}",
                )
            )
            rows.append(
                _row(
                    f"  floor: {seen['observers']} bare writes of {seen['event_bytes']} B",
                    f"{seen['bare_writes_ms']} ms (median of rounds)",
                )
            )
    for key, label in (
        ("uncapped", "eviction stall: {} expired"),
        ("capped", "  capped at {}"),
        ("window_count", "  self-preservation's count of {} at a window's end"),
    ):
        stall = figure["eviction_stall"].get(key)
        if stall is None:  # a figure from before the count was measured
            continue
        name = f"{stall['max_fraction']:.0%}" if key == "capped" else stall["leases"]
        done = "counted" if key == "window_count" else f"{stall['evicted']} evicted"
        rows.append(
            _row(
                label.format(name),
                f"{done} in {stall['sweep_ms']} ms, loop stalled "
                f"max {stall['longest_stall_ms']} ms (p99 {stall['p99_stall_ms']} ms; "
                f"{stall['full_collections']} full GCs, longest GC "
                f"{stall['longest_collection_ms']} ms)",
                target=f"(log level {stall['log_level']})",
            )
        )
    return rows


def _store_rows(figure: dict[str, Any]) -> list[Row]:
    """A restart with a full store beside empty starts; the store's size; its cost on and off."""
    start = figure["start_up"]
    n = start["instances"]
    restored = ", ".join(str(size) for size in start["restored_instances"])
    files = ", ".join(f"{name} {size / 1e6:.1f} MB" for name, size in start["db_files"].items())
    rows = [
        _row(
            f"start-up with {n} stored instances",
            f"{start['restart_seconds_median']} s to apps 200 "
            f"({', '.join(str(r['ready_seconds']) for r in start['restarts'])}); "
            f"serving after {start['restart_serving_seconds_median']} s, "
            f"{start['restarts'][0]['cpu_seconds']} s CPU",
            target=f"restored {restored} of {n}",
        ),
        _row(
            "  empty",
            f"{start['empty_seconds_median']} s",
            beside=f"store off: {start['empty_store_off_seconds_median']} s",
        ),
        _row(
            "db size per instance",
            f"{start['bytes_per_instance']} B/inst ({files})",
            target=f"SIGTERM to exit {start['stop_seconds']} s",
        ),
    ]
    on_off = figure["on_off"]
    for key, label in (("heartbeat", "heartbeat"), ("churn", "register+cancel")):
        both = on_off[key]
        on, off = both["on"], both["off"]
        per_batch = both["requests_per_batch"]
        rows.append(
            _beside(
                f"{label} store on / off",
                on,
                f"off: {_rps(off)}",
                both,
                f"CPU {on['cpu_us_per_request']} / {off['cpu_us_per_request']} us/req"
                + (f"; {per_batch:g} req/batch" if per_batch else ""),
            )
        )
    return rows


def _render(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _row(label: str, result: str, *, beside: str = "", timing: str = "", target: str = "") -> Row:
    """A row without ratios: a figure, with what stands beside it, its latency, its target."""
    return (label, result, beside, "", "", timing, target)


def _beside(
    label: str, ours: dict[str, Any], theirs: str, figure: dict[str, Any], target: str = ""
) -> Row:
    """A side-by-side row: our throughput, the other side's, the two ratios, our latency."""
    return (
        label,
        _rps(ours),
        theirs,
        _ratio(figure["ratio"]),
        _ratio(figure["cpu_ratio"]),
        _timing(ours),
        target,
    )


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _timing(summary: dict[str, Any]) -> str:
    return f"{summary['p50_ms_median']:.2f} / {summary['p99_ms_median']:.2f}"


def _rps(summary: dict[str, Any]) -> str:
    errors = f", {summary['errors']} err" if summary["errors"] else ""
    return f"{summary['rps_median']}/s ({summary['rps_min']}-{summary['rps_max']}{errors})"


if __name__ == "__main__":
    sys.exit(main())
