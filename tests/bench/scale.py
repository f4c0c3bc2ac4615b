"""The scale scenario: a registry of 100 000 instances under a steady mixed load.

In order, on one server with the default settings and a store:

* load: the instances (500 applications of 200, each with its own VIP address) are registered
  by CLIENTS concurrent clients in REGISTERING_PROCESSES processes of their own, their bodies
  encoded beforehand: registrations a second, and whose CPU limited them (the machine's too:
  it is shared).
* memory, bare: resident bytes per instance above the empty server's, right after the load,
  then once the store has written it and the process has settled.
* workload: for `seconds`, all at once: a heartbeat probe every PROBE_INTERVAL (in a process of
  its own, each on a connection of its own and timed from when it fell due, so a stall counts
  for every probe it held up, as for a fleet's clients), REGISTRATIONS_PER_SECOND new
  instances, DELTA_FETCHERS stock clients fetching the gzip JSON delta once a second, and one
  fetching the full registry every FULL_INTERVAL, gzip JSON and XML in turn. The server's own
  event-loop lag is read from `/metrics` meanwhile. It starts right after the load, well
  within Eureka's 3-minute delta window, so the delta holds the whole population, as after a
  fleet's mass (re)registration.
* full fetch after a change: one registration, then one full fetch (which must rebuild the
  document), each form in turn, a few rounds.
* memory, cached: once every kind of fetch document has been fetched.
* restart: SIGTERM, then a new server on the same store: seconds from its spawn until `/readyz`
  answers 200, and until a first JSON full fetch is complete.

Every request has REQUEST_TIMEOUT: one that runs out counts as timed out, and the scenario
goes on. Compressed answers are read as they come (`auto_decompress=False`): inflating them
would spend the load generator's CPU on the cores the server runs on.

Its modules, each constant beside what uses it:

* `tests.bench.scale` (this one): the phases in order.
* `tests.bench.scale_requests`: the sizes, the instances, timed requests (REQUEST_TIMEOUT).
* `tests.bench.scale_clients`: the helper processes, registering clients (CLIENTS,
  REGISTERING_PROCESSES) and the probe (PROBE_INTERVAL), run as
  `python -m tests.bench.scale_clients register|probe SPEC_JSON`.
* `tests.bench.scale_workload`: the mixed workload (REGISTRATIONS_PER_SECOND, DELTA_FETCHERS,
  FULL_INTERVAL) and the event-loop lag.
* `tests.bench.scale_report`: the table's rows and the targets.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from tests.bench import processes
from tests.bench.scale_clients import CLIENTS, REGISTERING_PROCESSES, run_helper
from tests.bench.scale_requests import (
    FORMS,
    JSON_BODY,
    Sizes,
    Timings,
    new_session,
    new_status_session,
    registration,
    scale_instance,
)
from tests.bench.scale_workload import mixed_workload
from tests.bench.scenarios import Plan, _status
from tests.bench.store import _written

LOAD_TIMEOUT = 600.0  # for the registering processes to finish
AFTER_CHANGE_ROUNDS = 5
FILL_CONCURRENCY = 8
FILL_TIMEOUT = 300.0  # to cache every document; what is left then counts as not fetched
SETTLE_SECONDS = 1.0  # after the store has written the load, before memory is read again
START_POLL = 0.005  # seconds between tries of `/readyz` while the restarted server starts


# The scenario -------------------------------------------------------------------------------


async def scale(plan: Plan) -> dict[str, Any]:
    sizes = Sizes(plan.scale_instances, plan.scale_apps, plan.scale_seconds)
    fresh = itertools.count(sizes.instances)  # numbers of the instances registered later
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as data_dir:
        async with processes.registry(
            store__data_dir=data_dir, ready_path="/readyz", leases__eviction_interval=3600
        ) as server:
            base = server.rss_bytes()
            load = await initial_load(server, sizes)
            memory = await bare_memory(server, sizes, base)
            workload = await mixed_workload(server, sizes, fresh)
            after_change = await full_fetch_after_a_change(server, sizes, fresh)
            memory.update(await cached_memory(server, sizes, base))
            restart = await stopped(server)
        restart.update(await restarted(Path(data_dir)))
    return {
        "instances": sizes.instances,
        "apps": sizes.apps,
        "seconds": sizes.seconds,
        "load": load,
        "memory": memory,
        "full_fetch_after_a_change": after_change,
        "workload": workload,
        "restart": restart,
    }


# Load ---------------------------------------------------------------------------------------


async def initial_load(server: processes.Server, sizes: Sizes) -> dict[str, Any]:
    """Every instance registered by CLIENTS clients, split over REGISTERING_PROCESSES.

    Each process reports when it began and ended sending (CLOCK_MONOTONIC: one clock for the
    machine), the CPU it used meanwhile (one near a CPU second a second was the limit), and
    the machine's at both ends.
    """
    cpu = server.cpu_seconds()
    spec = {"url": server.url, "instances": sizes.instances, "apps": sizes.apps}
    reports = await asyncio.gather(
        *(
            run_helper("register", {**spec, "part": part}, LOAD_TIMEOUT)
            for part in range(REGISTERING_PROCESSES)
        )
    )
    server_cpu = server.cpu_seconds() - cpu  # it has nothing else to do meanwhile
    first = min(reports, key=lambda r: r["began"])
    last = max(reports, key=lambda r: r["ended"])
    seconds = last["ended"] - first["began"]
    machine = last["machine_cpu_ended"] - first["machine_cpu_began"]
    registered = sum(r["registered"] for r in reports)
    return {
        "registered": registered,
        "errors": sum(r["errors"] for r in reports),
        "error_kinds": dict(
            sum((collections.Counter(r["error_kinds"]) for r in reports), collections.Counter())
        ),
        "timeouts": sum(r["timeouts"] for r in reports),
        "seconds": round(seconds, 2),
        "per_second": round(registered / seconds) if seconds else None,
        "p50_ms": max(r["p50_ms"] or 0 for r in reports),
        "p99_ms": max(r["p99_ms"] or 0 for r in reports),
        "clients": CLIENTS,
        # CPU seconds a second: of each registering process while it sent, and of the server
        "client_cpu_share": [
            round(r["cpu_seconds"] / (r["ended"] - r["began"]), 2) for r in reports
        ],
        "server_cpu_share": round(server_cpu / seconds, 2) if seconds else None,
        "machine_cpu_share": round(machine / seconds, 2) if seconds else None,  # of os.cpu_count()
    }


# Memory -------------------------------------------------------------------------------------


async def bare_memory(server: processes.Server, sizes: Sizes, base: int) -> dict[str, Any]:
    """Resident bytes per instance above the empty server's, right after the load, and once
    the store has written it and SETTLE_SECONDS have passed. Nothing has been fetched yet."""
    n = sizes.instances
    bare = server.rss_bytes()
    async with new_status_session() as status_session:
        written = await _written(status_session, server)
    await asyncio.sleep(SETTLE_SECONDS)
    return {
        "registration_body_bytes": len(registration(n - 1, sizes.apps)[1]),
        "base_rss_bytes": base,
        "bare_bytes_per_instance": round((bare - base) / n),
        "settled_bytes_per_instance": round((server.rss_bytes() - base) / n),
        "store_written_after_seconds": round(written, 2),
    }


async def cached_memory(server: processes.Server, sizes: Sizes, base: int) -> dict[str, Any]:
    """Resident bytes per instance once every kind of fetch document has been fetched."""
    started = time.monotonic()
    documents, missed = await _cache_everything(server, sizes)
    filled = time.monotonic() - started
    full_json = documents.get("full json")
    return {
        "cached_bytes_per_instance": round((server.rss_bytes() - base) / sizes.instances),
        "cache_fill_seconds": round(filled, 1),
        "cache_fill_not_fetched": missed,
        "documents": documents,  # bytes of each whole-registry document as served
        "instance_json_bytes": round(full_json / sizes.instances) if full_json else None,
    }


def _registry_documents() -> list[tuple[str, str, dict[str, str]]]:
    """(name, path, headers) of each form of the documents that hold the whole registry."""
    full = [(f"full {name}", "/eureka/apps/", headers) for name, headers in FORMS.items()]
    deltas = [
        (f"delta {name}", "/eureka/apps/delta", FORMS[name]) for name in FORMS if "gzip" in name
    ]
    return full + deltas


def _documents(sizes: Sizes) -> Iterator[tuple[str | None, str, dict[str, str]]]:
    """(name, path, headers) of every kind of fetch document: those of the whole registry
    first, then each application's and each VIP's (in JSON and XML, unnamed)."""
    yield from _registry_documents()
    for a in range(min(sizes.apps, sizes.instances)):
        app = scale_instance(a, sizes.apps)[0]
        for path in (f"/eureka/apps/{app}", f"/eureka/vips/{app.lower()}"):
            for name in ("json", "xml"):
                yield None, path, FORMS[name]


async def _cache_everything(server: processes.Server, sizes: Sizes) -> tuple[dict[str, int], int]:
    """Fetch each document once, FILL_CONCURRENCY at a time, until FILL_TIMEOUT.

    The whole-registry documents' sizes, and how many documents were not fetched.
    """
    deadline = time.monotonic() + FILL_TIMEOUT
    queue = _documents(sizes)
    documents: dict[str, int] = {}
    missed = 0

    async def fetcher(session: aiohttp.ClientSession) -> None:
        nonlocal missed
        for name, path, headers in queue:
            timings = Timings()
            if time.monotonic() < deadline:
                await timings.request(session, "GET", server.url + path, headers=headers)
            if not timings.sizes:
                missed += 1
            elif name is not None:
                documents[name] = timings.sizes[0]

    async with new_session(FILL_CONCURRENCY) as session:
        await asyncio.gather(*(fetcher(session) for _ in range(FILL_CONCURRENCY)))
    ordered = {name: documents[name] for name, _, _ in _registry_documents() if name in documents}
    return ordered, missed


# Full fetch after a change ------------------------------------------------------------------


async def full_fetch_after_a_change(
    server: processes.Server, sizes: Sizes, fresh: Iterator[int]
) -> dict[str, Any]:
    """Milliseconds for one full fetch right after one registration, each form in turn."""
    timings = {name: Timings() for name in FORMS}
    async with new_session(1) as session:
        for _ in range(AFTER_CHANGE_ROUNDS):
            for name, headers in FORMS.items():
                path, body = registration(next(fresh), sizes.apps)
                await Timings().request(
                    session, "POST", server.url + path, headers=JSON_BODY, data=body, expect=204
                )
                await timings[name].request(
                    session, "GET", f"{server.url}/eureka/apps/", headers=headers
                )
    return {name: t.summary() for name, t in timings.items()}


# Restart ------------------------------------------------------------------------------------


async def stopped(server: processes.Server) -> dict[str, Any]:
    """SIGTERM: seconds until the server exited, and the registry's size it stopped with."""
    async with new_status_session() as session:
        size = int((await _status(session, server))["generalStats"]["registry-size"])
    started = time.monotonic()
    try:
        code: int | str = await processes.stop(server)
    except RuntimeError as exc:
        code = str(exc)
    return {
        "registry_size": size,
        "stop_seconds": round(time.monotonic() - started, 2),
        "exit_code": code,
    }


async def restarted(data_dir: Path) -> dict[str, Any]:
    """A new server on `data_dir`: seconds from its spawn to `/readyz` 200 and to a complete
    first JSON full fetch, and how many instances it restored."""
    try:
        async with (
            processes.registry(
                store__data_dir=data_dir,
                ready_path="/readyz",
                ready_poll=START_POLL,
                leases__eviction_interval=3600,
            ) as server,
            new_session(1) as session,
            new_status_session() as status_session,
        ):
            fetch = Timings()
            await fetch.request(session, "GET", f"{server.url}/eureka/apps/", headers=FORMS["json"])
            assert server.spawned_at is not None and server.ready_seconds is not None
            fetched = asyncio.get_running_loop().time() - server.spawned_at
            status = await _status(status_session, server)
    except RuntimeError as exc:  # it did not start in time, or exited
        return {"restart_error": str(exc)}
    return {
        "ready_seconds": round(server.ready_seconds, 3),
        "first_full_fetch_seconds": round(fetched, 3) if fetch.ms else None,
        "first_full_fetch": fetch.summary(),
        "restored": int(status["generalStats"]["registry-size"]),
    }
