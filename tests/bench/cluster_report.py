"""The cluster scenario's rows in the runner's table, each target beside its figure."""

from __future__ import annotations

import math
from typing import Any

from tests.bench.cluster import DELTA_READERS, NODES, VICTIM
from tests.bench.cluster_fleet import CHURN_PER_SECOND
from tests.bench.scale_clients import PROBE_INTERVAL
from tests.bench.scale_report import PROBE_MAX_MS, PROBE_P99_MS, Row, _failures, _p50_p99, _row
from tests.bench.scale_report import _verdict as verdict

# Targets on a 2-core machine, judged only outside smoke runs.
LAG_P99_MS = 50
DELTA_P99_MS = 100
FULL_MAX_MS = 500
NAMES = "ABC"


def cluster_rows(figure: dict[str, Any], *, judged: bool) -> list[Row]:
    sizes, load, lag, restart = figure["sizes"], figure["load"], figure["lag"], figure["restart"]
    lag_ok = lag["p99_ms"] is not None and lag["p99_ms"] <= LAG_P99_MS and not lag["unseen"]
    clean = not any(figure["zombies"] + figure["lost"] + figure["zombies_at_workload_end"])
    first = restart.get("first_full_fetch_seconds")
    rows = [
        _row(
            f"cluster: {NODES} nodes, {figure['instances']} instances in {figure['apps']} apps "
            f"heartbeating every {sizes['interval']:g} s",
            f"loaded {load['per_second']}/s, on every node {load['on_every_node_after_seconds']} "
            f"s after the last, written {load['settled_after_seconds']} s after",
            side=f"churn {CHURN_PER_SECOND}+{CHURN_PER_SECOND}/s for {sizes['seconds']:g} s, "
            f"node {NAMES[VICTIM]} SIGKILLed at {sizes['kill_at']:g} s for {sizes['outage']:g} s",
        ),
    ]
    for n, node in enumerate(figure["nodes"]):
        rows.extend(_node_rows(NAMES[n], node, sizes["full_interval"], judged=judged))
    rows += [
        _row(
            "  replication lag: registration to another node's watch",
            f"{lag['samples']} seen, max {lag['max_ms']} ms, {lag['unseen']} unseen",
            ms=_p50_p99(lag),
            target=f"p99 <= {LAG_P99_MS} ms {verdict(lag_ok, judged)}",
        ),
        _row(
            f"  node {NAMES[VICTIM]} restarted (from its spawn)",
            f"ready {restart.get('ready_seconds')} s, first gzip full fetch {first} s, "
            f"agreeing with a peer {restart.get('agreeing_seconds')} s"
            + (f" failed: {restart['restart_error']}" if "restart_error" in restart else ""),
            # The first full fetch's target (2 s) is a lone node's: the scale scenario judges it
            target="reported",
        ),
        _row(
            "  zombies / lost acknowledged changes, by node",
            f"zombies {figure['zombies']}, lost {figure['lost']} (of {figure['live']} live, "
            f"{figure['cancelled']} cancelled)",
            side=f"zombies at the workload's end {figure['zombies_at_workload_end']}; nodes "
            f"agreed {figure['agreed_after_seconds']} s after the fleet stopped",
            target=f"0 {verdict(clean, judged)}",
        ),
    ]
    return rows


def _node_rows(name: str, node: dict[str, Any], full_interval: float, *, judged: bool) -> list[Row]:
    probed, deltas, loading = node["probe"], node["delta_json_gzip"], node["during_the_load"]
    steady = (
        probed["p99_ms"] is not None
        and probed["p99_ms"] <= PROBE_P99_MS
        and probed["max_ms"] <= PROBE_MAX_MS
    )
    delta_ok = deltas["p99_ms"] is not None and deltas["p99_ms"] <= DELTA_P99_MS
    fulls = node["full"].values()
    longest = max((t["max_ms"] or math.inf) if t["count"] else 0 for t in fulls)
    return [
        _row(
            f"  node {name}: heartbeat probe every {1000 * PROBE_INTERVAL:g} ms",
            f"{probed['answered']} of {probed['sent']}, max {probed['max_ms']} ms"
            + _failures(probed),
            side=f"CPU/s {node['cpu_share']}, RSS {node['rss_bytes'] / 1e6:.0f} MB",
            ms=_p50_p99(probed),
            target=f"p99 <= {PROBE_P99_MS}, max <= {PROBE_MAX_MS} ms {verdict(steady, judged)}",
        ),
        _row(
            f"    delta gzip, {DELTA_READERS // NODES} clients each 1/s",
            f"{deltas['count']}, max {deltas['max_ms']} ms{_failures(deltas)}",
            side=f"during the load: {_reads(loading['delta_json_gzip'])}",
            ms=_p50_p99(deltas),
            target=f"p99 <= {DELTA_P99_MS} ms {verdict(delta_ok, judged)}",
        ),
        _row(
            f"    full gzip every {full_interval * NODES:g} s",
            ", ".join(f"{form} {_reads(t)}" for form, t in node["full"].items()),
            side="during the load: "
            + ", ".join(f"{form} {_reads(t)}" for form, t in loading["full"].items()),
            target=f"max <= {FULL_MAX_MS} ms {verdict(longest <= FULL_MAX_MS, judged)}",
        ),
    ]


def _reads(summary: dict[str, Any]) -> str:
    """`12, median 9.5 ms, max 20.1 ms` and what failed, or `none`."""
    if not summary["count"]:
        return "none" + _failures(summary)
    return (
        f"{summary['count']}, median {summary['median_ms']} ms, max {summary['max_ms']} ms"
        + _failures(summary)
    )
