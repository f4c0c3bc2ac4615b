"""The store scenario: what persisting the registry in SQLite costs, and what a restart costs.

* start-up: a server with its own data directory registers many instances, writes them behind,
  and is stopped with SIGTERM (as a service manager stops it); the database's size on disk is
  then divided by the instances. A new server on the same directory must restore them all
  before it answers `apps`, so the seconds from its spawn until `apps` answers 200 are the
  warm restart's cost; empty servers, with and without a store, started the same way, tell
  that apart from the interpreter's own start-up.
* on and off: heartbeats, then registrations alternating with cancels, on a server with a store
  beside one without, runs alternating as in the replication scenario. Heartbeats are never
  written, so their figure shows what the store costs the path every client takes every 30 s;
  the churn's every request is a change the writer must take up.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.bench import processes, workloads
from tests.bench.scenarios import Plan, Series, _status, compared

DB_FILES = ("registry.db", "registry.db-wal", "registry.db-shm")
START_POLL = 0.005  # seconds between tries of `apps` while a timed server starts
WRITTEN_TIMEOUT = 120.0  # for a server's store to have nothing pending
# The store's figures must stand still this long (more than a flush interval) to count as written
SETTLE = 0.3
JSON = {"Accept": "application/json"}


@dataclass(frozen=True)
class Sizes:
    stored_instances: int  # the population a restart restores
    restarts: int  # each restart is timed beside an empty server's start


FULL = Sizes(100_000, 2)
SMOKE = Sizes(2_000, 2)


async def store(plan: Plan) -> dict[str, Any]:
    sizes = SMOKE if plan.smoke else FULL
    return {
        "start_up": await start_up(sizes),
        "on_off": await on_and_off(plan),
    }


# Start-up -----------------------------------------------------------------------------------


async def start_up(sizes: Sizes) -> dict[str, Any]:
    """Restart seconds with `sizes.stored_instances` in the store, beside empty starts.

    The restarts and the empty starts alternate, so drift on the machine reaches both. The page
    cache holds the database by the first restart (it was just written): these are warm
    restarts of a service, not a cold boot of the machine.
    """
    n = sizes.stored_instances
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        data_dir = Path(tmp)
        async with aiohttp.ClientSession() as session:
            written = await _written_and_stopped(session, data_dir, n)
            on_disk = _db_files(data_dir)
            restarts, empty, no_store = [], [], []
            for _ in range(sizes.restarts):
                restarts.append(await _timed_start(session, store__data_dir=data_dir))
                with tempfile.TemporaryDirectory(prefix="bench-store-empty-") as empty_dir:
                    empty.append(await _timed_start(session, store__data_dir=Path(empty_dir)))
                no_store.append(await _timed_start(session, store__enabled=False))
    total = sum(on_disk.values())
    return {
        "instances": n,
        **written,
        "db_bytes": total,
        "db_files": on_disk,  # after the stop: SQLite folds the WAL in when the last one closes
        "bytes_per_instance": round(total / n),
        "restarts": restarts,
        "restart_seconds_median": _median([r["ready_seconds"] for r in restarts]),
        "restart_serving_seconds_median": _median([r["serving_seconds"] for r in restarts]),
        "restored_instances": [r["registry_size"] for r in restarts],
        "empty": empty,
        "empty_seconds_median": _median([r["ready_seconds"] for r in empty]),
        "empty_store_off_seconds_median": _median([r["ready_seconds"] for r in no_store]),
    }


async def _written_and_stopped(
    session: aiohttp.ClientSession, data_dir: Path, n: int
) -> dict[str, Any]:
    """Register `n` instances on a server storing in `data_dir`, wait for the writes, SIGTERM."""
    async with processes.registry(
        store__data_dir=data_dir, leases__eviction_interval=3600
    ) as server:
        started = time.monotonic()
        await processes.populate(server, n)
        populated = time.monotonic() - started
        written = await _written(session, server)
        running = sum(_db_files(data_dir).values())  # the WAL as the writes left it
        status = (await _status(session, server))["store"]
        started = time.monotonic()
        code = await processes.stop(server)
        stopped = time.monotonic() - started
    if code != 0:
        raise RuntimeError(f"the populated server exited with {code} on SIGTERM")
    return {
        "populate_seconds": round(populated, 2),
        "written_after_seconds": round(written, 2),  # past the last registration's answer
        "batches": status["batches"],
        "failures": status["failures"],
        "db_bytes_while_running": running,
        "stop_seconds": round(stopped, 2),
    }


async def _timed_start(session: aiohttp.ClientSession, **settings: object) -> dict[str, Any]:
    """One start, timed from the spawn until `apps` answers 200, then what it restored.

    The server listens only once the restore is done, so the first answer of `status` tells
    when it serves; the JSON full fetch sent then (as a Java client's first fetch) must encode
    every restored instance, which a restart costs its first client too. Both are timed from
    the spawn. The CPU seconds are the server's own until it served: the interpreter's
    start-up, the imports and the restore.
    """
    async with processes.registry(
        ready_path="/eureka/status",
        ready_poll=START_POLL,
        leases__eviction_interval=3600,
        **settings,
    ) as server:
        cpu = server.cpu_seconds()
        async with session.get(f"{server.url}/eureka/apps", headers=JSON) as response:
            await response.read()
            if response.status != 200:
                raise RuntimeError(f"apps answered {response.status} after the start")
        assert server.spawned_at is not None and server.ready_seconds is not None
        fetched = asyncio.get_running_loop().time() - server.spawned_at
        status = await _status(session, server)
        code = await processes.stop(server)
    if code != 0:
        raise RuntimeError(f"a timed server exited with {code} on SIGTERM")
    return {
        "ready_seconds": round(fetched, 3),  # spawn to apps 200
        "serving_seconds": round(server.ready_seconds, 3),  # spawn to status 200
        "cpu_seconds": round(cpu, 2),
        "registry_size": int(status["generalStats"]["registry-size"]),
        "store_degraded": status["store"].get("degraded"),
    }


def _db_files(data_dir: Path) -> dict[str, int]:
    """Bytes of the database's files that exist (the WAL and its index only while in use)."""
    return {
        name: (data_dir / name).stat().st_size for name in DB_FILES if (data_dir / name).exists()
    }


async def _written(session: aiohttp.ClientSession, server: processes.Server) -> float:
    """Seconds until `server`'s store had written everything (0 without a store).

    `pending` counts what no flush has taken up yet: it reads 0 as soon as a flush takes the
    last changes, while their batch is still on its way to the disk. So nothing pending is not
    enough: the count of batches written must also stand still for SETTLE seconds. The figure
    is the time of the last change seen, not the SETTLE spent making sure.
    """
    started = time.monotonic()
    last: tuple[int, int] | None = None
    changed = started
    for _ in range(round(WRITTEN_TIMEOUT / processes.POLL)):
        figures = (await _status(session, server))["store"]
        if not figures["enabled"]:
            return 0.0
        now = time.monotonic()
        state = (figures["pending"], figures["batches"])
        if state != last or figures["pending"]:
            last, changed = state, now
        elif now - changed >= SETTLE:
            return changed - started
        await asyncio.sleep(processes.POLL)
    raise RuntimeError(f"the store was still writing after {WRITTEN_TIMEOUT} s")


# Store on and off ---------------------------------------------------------------------------


async def on_and_off(plan: Plan) -> dict[str, Any]:
    """Heartbeats, then register+cancel churn, on a server with a store beside one without."""
    n = plan.instances
    async with (
        processes.registry(leases__eviction_interval=3600, store__enabled=True) as on,
        processes.registry(leases__eviction_interval=3600, store__enabled=False) as off,
        aiohttp.ClientSession() as session,
    ):
        for server in (on, off):
            await processes.populate(server, n)
        await _written(session, on)
        beat = workloads.heartbeats(n)
        heartbeat = await alternating(
            plan, session, on, off, beat, {"kind": "heartbeat", "instances": n}
        )
        churn = await alternating(plan, session, on, off, workloads.churn(), {"kind": "churn"})
        final = (await _status(session, on))["store"]
    return {
        "instances": n,
        "heartbeat": heartbeat,
        "churn": churn,
        "store_at_end": {key: final[key] for key in ("degraded", "failures", "batches")},
    }


async def alternating(
    plan: Plan,
    session: aiohttp.ClientSession,
    on: processes.Server,
    off: processes.Server,
    workload: workloads.Workload,
    spec: dict[str, object],
) -> dict[str, Any]:
    """Saturating runs of `workload` with the store and without, who goes first alternating.

    Each run with the store ends once nothing is pending, so the writes it caused count in its
    CPU figure and do not compete with the next run. The writer keeps only each instance's
    newest state between flushes, so how many requests one batch took up is reported too.
    """
    if plan.warm_up:  # one short unmeasured run each, so neither side is measured cold
        for server in (on, off):
            await plan.load.run(server.url, workload, 1, spec)
            await _written(session, server)
    stored, unstored = Series(), Series()
    written: list[float] = []  # seconds after each run with the store until nothing pended
    per_batch: list[float] = []  # requests per batch written, per run with the store
    flushes: list[float] = []  # batches written a second, per run with the store
    sides = [(stored, on), (unstored, off)]
    for run in range(plan.runs):
        for series, server in sides if run % 2 == 0 else sides[::-1]:
            before = server.cpu_seconds()
            batches = (await _status(session, server))["store"].get("batches", 0)
            result = await plan.load.run(server.url, workload, plan.seconds, spec)
            drain = await _written(session, server)
            used = server.cpu_seconds() - before
            series.results.append(result)
            series.cpu_us_per_request.append(1e6 * used / result.requests if result.requests else 0)
            if server is on:
                written.append(drain)
                batches = (await _status(session, server))["store"]["batches"] - batches
                if batches:  # none for heartbeats
                    per_batch.append(result.requests / batches)
                flushes.append(batches / (result.seconds + drain))
    figures = compared(stored, unstored)
    return {
        "on": figures["registry"],
        "off": figures["ceiling"],
        "ratio": figures["ratio"],  # on / off
        "cpu_ratio": figures["cpu_ratio"],  # off / on CPU per request
        "written_after_seconds_max": round(max(written), 2) if written else None,
        "requests_per_batch": _median(per_batch),
        "batches_per_second": _median(flushes),
    }


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None
