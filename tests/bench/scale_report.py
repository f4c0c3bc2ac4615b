"""The scale scenario's rows in the runner's table, each target beside its figure."""

from __future__ import annotations

import math
from typing import Any

from tests.bench.scale_clients import PROBE_INTERVAL
from tests.bench.scale_workload import DELTA_FETCHERS, FULL_INTERVAL, REGISTRATIONS_PER_SECOND

# Targets on a 2-core machine, judged only outside smoke runs.
PROBE_P99_MS, PROBE_MAX_MS = 20, 100
AFTER_CHANGE_MS = 150
READY_SECONDS = 2.0
REGISTRATIONS_TARGET = 5_000

Row = tuple[str, str, str, str, str, str, str]


def scale_rows(figure: dict[str, Any], *, judged: bool) -> list[Row]:
    """One row per figure, each target beside its figure (smoke runs are not judged)."""
    load, memory, work = figure["load"], figure["memory"], figure["workload"]
    probed, lag, deltas = work["probe"], work["loop_lag"], work["delta_json_gzip"]
    after, restart, added = (
        figure["full_fetch_after_a_change"],
        figure["restart"],
        work["registrations"],
    )
    fine = (load["per_second"] or 0) >= REGISTRATIONS_TARGET
    steady = (
        probed["p99_ms"] is not None
        and probed["p99_ms"] <= PROBE_P99_MS
        and probed["max_ms"] <= PROBE_MAX_MS
        and not probed["timeouts"]
    )
    quick = all((after[name]["max_ms"] or math.inf) <= AFTER_CHANGE_MS for name in ("json", "xml"))
    ready = restart.get("ready_seconds")
    fast = ready is not None and ready <= READY_SECONDS
    over = _lags_over(lag["histogram"])
    if "restart_error" in restart:
        restarted_as = f"failed: {restart['restart_error']}"
    else:
        restarted_as = (
            f"ready {ready} s, first full fetch {restart['first_full_fetch_seconds']} s, "
            f"restored {restart['restored']} of {restart['registry_size']}"
        )
    return [
        _row(
            f"scale: {figure['instances']} instances in {figure['apps']} apps, "
            f"load by {load['clients']} clients",
            f"{load['per_second']}/s ({load['seconds']} s{_failures(load)})",
            side=f"CPU/s: clients {load['client_cpu_share']}, server "
            f"{load['server_cpu_share']}, machine {load['machine_cpu_share']}",
            ms=_p50_p99(load),
            target=f">= {REGISTRATIONS_TARGET}/s {_verdict(fine, judged)}",
        ),
        _row(
            f"  heartbeat probe every {1000 * PROBE_INTERVAL:g} ms, "
            f"{figure['seconds']:g} s mixed load",
            f"{probed['answered']} of {probed['sent']}, max {probed['max_ms']} ms"
            + _failures(probed),
            side=f"CPU/s: server {work['server_cpu_share']}, machine {work['machine_cpu_share']}",
            ms=_p50_p99(probed),
            target=f"p99 <= {PROBE_P99_MS}, max <= {PROBE_MAX_MS} ms {_verdict(steady, judged)}",
        ),
        _row(
            f"  delta JSON gzip, {DELTA_FETCHERS} clients each 1/s",
            f"{deltas['count']} fetches, max {deltas['max_ms']} ms{_failures(deltas)}",
            side=f"{_size(deltas['bytes_median'])} each",
            ms=_p50_p99(deltas),
        ),
        _row(
            f"  full gzip every {FULL_INTERVAL:g} s",
            ", ".join(_timing(name, t) for name, t in work["full"].items()),
        ),
        _row(
            f"  registrations {REGISTRATIONS_PER_SECOND}/s",
            f"{added['count']}, max {added['max_ms']} ms{_failures(added)}",
            ms=_p50_p99(added),
        ),
        _row(
            "  event-loop stall",
            f"longest {lag['longest_ms']} ms (10 s maxima {lag['recent_max_samples_ms']})",
            side=f"lags > 20 ms: {over[0]}, > 100 ms: {over[1]}",
            target=f"since start {lag['since_start_ms']} ms",
        ),
        _row(
            "  plain full fetch after a change",
            ", ".join(_timing(name, after[name]) for name in ("json", "xml")),
            side="headers after: "
            + ", ".join(
                f"{name} {after[name]['answered_median_ms']} ms "
                f"(max {after[name]['answered_max_ms']})"
                for name in ("json", "xml")
            ),
            target=f"max <= {AFTER_CHANGE_MS} ms {_verdict(quick, judged)}",
        ),
        _row(
            "    gzip", ", ".join(_timing(name, after[name]) for name in ("json+gzip", "xml+gzip"))
        ),
        _row(
            "  memory per instance",
            f"bare {memory['bare_bytes_per_instance']} B, settled "
            f"{memory['settled_bytes_per_instance']} B, all cached "
            f"{memory['cached_bytes_per_instance']} B",
            side=f"instance: registered {memory['registration_body_bytes']} B, "
            f"in full JSON {memory['instance_json_bytes']} B",
            target=f"{memory['cache_fill_not_fetched']} not cached",
        ),
        _row(
            "  full documents",
            ", ".join(f"{name} {_size(size)}" for name, size in memory["documents"].items()),
        ),
        _row(
            "  restart (from the spawn)",
            restarted_as,
            side=f"SIGTERM to exit {restart['stop_seconds']} s",
            target=f"ready <= {READY_SECONDS:g} s {_verdict(fast, judged)}",
        ),
    ]


def _row(label: str, value: str, *, side: str = "", ms: str = "", target: str = "") -> Row:
    """A row of the runner's table: its ratio columns stay empty here."""
    return (label, value, side, "", "", ms, target)


def _verdict(ok: bool, judged: bool) -> str:
    return ("ok" if ok else "MISSED") if judged else "(smoke: not judged)"


def _p50_p99(summary: dict[str, Any]) -> str:
    return f"{summary['p50_ms']} / {summary['p99_ms']}"


def _failures(summary: dict[str, Any]) -> str:
    """`, 3 err (status 500: 3), 2 timed out` and the like, or nothing."""
    kinds = ", ".join(f"{kind}: {n}" for kind, n in summary.get("error_kinds", {}).items())
    return "".join(
        f", {summary[key]} {label}"
        for key, label in (
            ("errors", f"err ({kinds})" if kinds else "err"),
            ("timeouts", "timed out"),
            ("skipped", "skipped"),
            ("opened", "on new connections"),
        )
        if summary.get(key)
    )


def _timing(name: str, summary: dict[str, Any]) -> str:
    """`json 12.5 ms (max 20.1)`: the median and the longest, and what failed."""
    if not summary["count"]:
        return f"{name}: none answered{_failures(summary)}"
    return f"{name} {summary['median_ms']} ms (max {summary['max_ms']}{_failures(summary)})"


def _lags_over(histogram: dict[str, int] | None) -> tuple[int | None, int | None]:
    """How many lags in the histogram's counts were above 20 ms, and above 100 ms."""
    if histogram is None:
        return None, None
    above = [sum(n for le, n in histogram.items() if float(le) > bound) for bound in (0.02, 0.1)]
    return above[0], above[1]


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} KB"
