"""A node of ours joining a stock Eureka server, as a migration starts: how long until it serves
the stock peer's whole registry, and what keeping up with that peer costs both sides.

The stock server (tests/bench/eureka_server/, processes.EUREKA_JVM) holds `scale_instances`
bench instances, registered once with a lease of an hour (workloads.instance_body) and never
renewed: nothing runs out during a run. Before a node joins, the stock server's own answer to
`GET apps/` (JSON, as our node asks for it) must hold them all (its read-only cache refreshes
every 30 s), and is read twice more so its JIT has served it as a server that has been up a
while has. Then, `runs` times, a node of ours is spawned with the stock server as its one peer
and otherwise the settings every bench node has (processes.registry: its store on, in a
directory of its own), and timed from its spawn until `/readyz` answers 200, and until its
`GET /eureka/apps` (JSON) lists every instance; `GET status` says what reads opened on.

Keeping up: the last node that joined is watched at its default `anti_entropy_interval` for
ROUNDS rounds, each of which fetches the stock server's whole `apps`, parses it and compares it
application by application (peers/stock.py). A round is found by the bytes the stock server
writes (/proc/PID/io: it answers nobody else meanwhile; the node's own reads would also count
its store's, a checkpoint's megabytes among them), its end by the node's CPU falling back to
idle; each side's CPU in a round is what it used over its own idle rate (the rest of the
watch) in that window.

`code` (`--registry-code`) runs the node from another checkout: the release before a change,
whose reads may open only at the end of `peer_sync_empty_window` with nothing copied; its
`apps` is then watched for AFTER_READY seconds and said to be incomplete.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
import zlib
from pathlib import Path
from typing import Any

import aiohttp

from registry.codec.wire import REPLICATION_HEADER
from registry.settings import Settings
from tests.bench import processes
from tests.bench.against_eureka import JAR, populated
from tests.bench.scale_report import Row
from tests.bench.scenarios import Plan
from tests.stock_clients.java import build, missing

EUREKA_SERVER = JAR.parents[1]
JOIN_TIMEOUT = 420.0  # from the spawn to reads open: the empty-sync window (5 min) and room
AFTER_READY = 65.0  # reads open, how long `apps` is watched for the rest (two rounds)
STOCK_TIMEOUT = 90.0  # for the stock server's cached `apps` to hold the population
READY_POLL = 0.02  # seconds between /readyz probes
APPS_POLL = 0.5  # seconds between full fetches of the joined node, while it lacks some
ROUNDS = 3  # anti-entropy rounds watched (one in a smoke run)
SAMPLE = 0.25  # seconds between samples of both processes' CPU while watching rounds
LEAD = 4  # samples: a round's fetch is read over a few, and began (the stock's work) before
QUIET_CORES = 0.05  # above its idle rate, a node still busy with a round
QUIET_SAMPLES = 4  # a round is over once the node has been idle this many samples in a row
# Our node's peer session asks with these, aiohttp adds gzip (peers/transport.py)
PEER_HEADERS = {REPLICATION_HEADER: "true", "Accept": "application/json"}
INSTANCE = b'"instanceId":'


async def join_stock(plan: Plan) -> dict[str, Any]:
    why = missing()
    if why is not None:
        return {"skipped": why}
    await asyncio.to_thread(build, EUREKA_SERVER)
    count = plan.scale_instances
    interval = Settings().peers.anti_entropy_interval
    results: dict[str, Any] = {
        "jvm": " ".join(processes.EUREKA_JVM),
        "instances": count,
        "code": str(plan.registry_code) if plan.registry_code else "this checkout",
        "anti_entropy_interval": interval,
    }
    async with processes.eureka_server(JAR) as stock:
        results["stock"] = await populated(stock, count)
        results["stock"].update(await stock_serves(stock, count))
        joins = []
        for run in range(plan.runs):
            async with processes.registry(
                peers__urls=f"{stock.url}/eureka/", ready_path=None, code=plan.registry_code
            ) as node:
                joins.append(await joined(node, count))
                print(f"join_stock: run {run + 1}: {joins[-1]}", flush=True)
                if run == plan.runs - 1 and joins[-1]["complete_seconds"] is not None:
                    rounds = 1 if plan.smoke else ROUNDS
                    results["anti_entropy"] = await watched_rounds(
                        node, stock, rounds, interval, results["stock"]["apps_bytes"]
                    )
    results["joins"] = joins
    results["ready_seconds_median"] = _median([j["ready_seconds"] for j in joins])
    done = [j["complete_seconds"] for j in joins]
    results["complete_seconds_median"] = None if None in done else _median(done)
    return results


async def stock_serves(stock: processes.Server, count: int) -> dict[str, Any]:
    """Wait until the stock server's `apps`, asked for as our node asks, lists `count`
    instances; read it twice more (its JIT's turn). Its size as sent, and as JSON."""
    deadline = time.monotonic() + STOCK_TIMEOUT
    warm = 2
    async with aiohttp.ClientSession(headers=PEER_HEADERS, auto_decompress=False) as session:
        while True:
            async with session.get(f"{stock.url}/eureka/apps/") as response:
                sent = await response.read()
                gzipped = response.headers.get("Content-Encoding") == "gzip"
            document = await asyncio.to_thread(zlib.decompress, sent, 31) if gzipped else sent
            if document.count(INSTANCE) >= count:
                if warm == 0:
                    return {"apps_bytes": len(sent), "apps_json_bytes": len(document)}
                warm -= 1
            elif time.monotonic() > deadline:
                raise RuntimeError(f"the stock server lists {document.count(INSTANCE)} of {count}")
            else:
                await asyncio.sleep(1.0)


async def joined(node: processes.Server, count: int) -> dict[str, Any]:
    """From the node's spawn: seconds until /readyz answered 200, until its `apps` listed all
    `count` instances (None: not within AFTER_READY of reads opening), and its CPU by then."""
    loop = asyncio.get_running_loop()
    spawned = node.spawned_at or loop.time()
    json = {"Accept": "application/json"}
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(f"{node.url}/readyz") as response:
                if response.status == 200:
                    break
            if loop.time() - spawned > JOIN_TIMEOUT:
                raise RuntimeError(f"reads did not open within {JOIN_TIMEOUT} s of the spawn")
            await asyncio.sleep(READY_POLL)
        ready = loop.time() - spawned
        figure: dict[str, Any] = {
            "ready_seconds": round(ready, 2),
            "cpu_seconds_at_ready": round(node.cpu_seconds(), 2),
        }
        async with session.get(f"{node.url}/eureka/status", headers=json) as response:
            figure["reads_reason"] = (await response.json())["generalStats"]["reads-reason"]
        held, complete = 0, None
        while complete is None and loop.time() - spawned - ready < AFTER_READY:
            async with session.get(f"{node.url}/eureka/apps", headers=json) as response:
                held = (await response.read()).count(INSTANCE)
            if held >= count:
                complete = loop.time() - spawned
            else:
                await asyncio.sleep(APPS_POLL)
    figure.update(
        {
            "complete_seconds": None if complete is None else round(complete, 2),
            "held": held,
            "cpu_seconds_at_complete": round(node.cpu_seconds(), 2),
            "rss_mb": round(node.rss_bytes() / 1e6),
        }
    )
    return figure


async def watched_rounds(
    node: processes.Server,
    stock: processes.Server,
    rounds: int,
    interval: float,
    apps_bytes: int,
) -> dict[str, Any]:
    """Both processes' CPU, sampled while the node makes `rounds` anti-entropy rounds with
    the stock server: each round's cost over each side's idle rate."""
    jump = apps_bytes // 2  # a round's fetch: the whole `apps` as sent; otherwise it is idle
    deadline = time.monotonic() + (rounds + 1) * interval + 30
    samples = [_sample(node, stock)]
    starts: list[int] = []  # indexes of the samples by which the stock had sent a round's `apps`
    while time.monotonic() < deadline:
        await asyncio.sleep(SAMPLE)
        samples.append(_sample(node, stock))
        latest = len(samples) - 1
        recent = samples[-1][4] - samples[max(latest - LEAD, 0)][4]
        if recent >= jump and (not starts or latest - starts[-1] > 2 * LEAD):
            starts.append(latest)
        if len(starts) >= rounds and (latest - starts[-1]) * SAMPLE > interval / 2:
            break  # half an interval past the last round's fetch: it is done
    return _rounds(samples, starts[:rounds])


Sample = tuple[float, float, float, int, int]


def _sample(node: processes.Server, stock: processes.Server) -> Sample:
    """(when, node CPU, stock CPU, bytes the node has read, bytes the stock has written)."""
    read = _io(node, "rchar")
    return time.monotonic(), node.cpu_seconds(), stock.cpu_seconds(), read, _io(stock, "wchar")


def _io(server: processes.Server, field: str) -> int:
    lines = Path(f"/proc/{server.process.pid}/io").read_text().splitlines()
    return next(int(line.split()[1]) for line in lines if line.startswith(field + ":"))


def _rounds(samples: list[Sample], starts: list[int]) -> dict[str, Any]:
    rates = [
        (b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(samples)
    ]  # rates[i]: the node's cores between samples i and i + 1
    quiet = statistics.median(rates) + QUIET_CORES
    windows = []
    for start in starts:
        end = start  # the first sample after which the node was idle for QUIET_SAMPLES
        while end < len(rates) and any(rate > quiet for rate in rates[end : end + QUIET_SAMPLES]):
            end += 1
        windows.append((max(start - LEAD, 0), end))
    inside = {i for first, last in windows for i in range(first, last)}

    def idle_rate(field: int) -> float:
        spans = [(samples[i], samples[i + 1]) for i in range(len(rates)) if i not in inside]
        used = sum(b[field] - a[field] for a, b in spans)
        return used / max(sum(b[0] - a[0] for a, b in spans), 1e-9)

    node_idle, stock_idle = idle_rate(1), idle_rate(2)
    each = []
    for first, last in windows:
        a, b = samples[first], samples[last]
        wall = b[0] - a[0]
        each.append(
            {
                "wall_seconds": round(wall, 2),
                "node_cpu_seconds": round(b[1] - a[1] - node_idle * wall, 3),
                "stock_cpu_seconds": round(b[2] - a[2] - stock_idle * wall, 3),
                "node_read_mb": round((b[3] - a[3]) / 1e6, 1),
                "stock_sent_mb": round((b[4] - a[4]) / 1e6, 1),
            }
        )
    return {
        "rounds": each,
        "node_idle_cores": round(node_idle, 4),
        "stock_idle_cores": round(stock_idle, 4),
        "watched_seconds": round(samples[-1][0] - samples[0][0], 1),
        "node_cpu_seconds_median": _median([r["node_cpu_seconds"] for r in each]),
        "stock_cpu_seconds_median": _median([r["stock_cpu_seconds"] for r in each]),
    }


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def join_stock_rows(figure: dict[str, Any]) -> list[Row]:
    """The join's figures as rows of the benchmark's table."""
    if "skipped" in figure:
        return [("join a stock Eureka peer", f"skipped: {figure['skipped']}", "", "", "", "", "")]
    n = figure["instances"]
    joins = figure["joins"]

    def each(key: str) -> str:
        return ", ".join("never" if j[key] is None else f"{j[key]:g}" for j in joins)

    complete = figure["complete_seconds_median"]
    held = ", ".join(str(j["held"]) for j in joins if j["complete_seconds"] is None)
    rows: list[Row] = [
        (
            f"join a stock Eureka peer holding {n} ({figure['code']}; its JVM {figure['jvm']})",
            f"/readyz 200 after {figure['ready_seconds_median']} s median "
            f"({each('ready_seconds')})",
            f"stock: {figure['stock']['registrations_per_second']} reg/s, "
            f"apps {figure['stock']['apps_bytes'] / 1e6:.1f} MB sent",
            "",
            "",
            "",
            "",
        ),
        (
            "  apps (JSON) lists all of them",
            "never" + (f" (held {held})" if held else "")
            if complete is None
            else f"after {complete} s median ({each('complete_seconds')})",
            f"CPU {each('cpu_seconds_at_complete')} s; RSS {joins[-1]['rss_mb']} MB",
            "",
            "",
            "",
            "",
        ),
        ("  reads opened on", joins[-1]["reads_reason"], "", "", "", "", ""),
    ]
    rounds = figure.get("anti_entropy")
    if rounds is not None:
        rows.append(
            (
                f"  anti-entropy with it, every {figure['anti_entropy_interval']:g} s",
                f"ours {rounds['node_cpu_seconds_median']} CPU s a round "
                f"({', '.join(str(r['node_cpu_seconds']) for r in rounds['rounds'])})",
                f"stock JVM {rounds['stock_cpu_seconds_median']} CPU s a fetch "
                f"({', '.join(str(r['stock_cpu_seconds']) for r in rounds['rounds'])})",
                "",
                "",
                "",
                f"idle: ours {rounds['node_idle_cores']}, stock {rounds['stock_idle_cores']} cores",
            )
        )
    return rows
