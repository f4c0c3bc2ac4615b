"""The server's phases: the moves the table allows and refuses, and the phase a real process
shows through `/readyz` while it syncs, serves and stops, and a real process stopped while
its start is under way or its store fails."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from pathlib import Path

import aiohttp
import pytest

from registry.errors import NotSynced
from registry.lifecycle import ALLOWED, InvalidTransition, Lifecycle, Phase
from registry.store.sqlite import Store
from tests.helpers import eventually, free_port, instance_doc, locked
from tests.processes import READY_TIMEOUT, run

P = Phase
# Every move the server makes, written out here rather than read from the table.
MOVES = {
    (P.STARTING, P.RESTORING),
    (P.STARTING, P.SYNCING),
    (P.STARTING, P.SERVING),
    (P.STARTING, P.DRAINING),
    (P.RESTORING, P.SYNCING),
    (P.RESTORING, P.SERVING),
    (P.RESTORING, P.DRAINING),
    (P.SYNCING, P.SERVING),
    (P.SYNCING, P.DRAINING),
    (P.SERVING, P.DRAINING),
    (P.DRAINING, P.STOPPED),
}


def at(phase: Phase) -> Lifecycle:
    """A lifecycle brought to `phase` by allowed moves."""
    lifecycle = Lifecycle()
    path = {
        P.STARTING: [],
        P.RESTORING: [P.RESTORING],
        P.SYNCING: [P.SYNCING],
        P.SERVING: [P.SERVING],
        P.DRAINING: [P.DRAINING],
        P.STOPPED: [P.DRAINING, P.STOPPED],
    }[phase]
    for step in path:
        lifecycle.move(step, "on the way")
    return lifecycle


def test_the_table_is_the_moves_the_server_makes():
    assert MOVES == {(a, b) for a, targets in ALLOWED.items() for b in targets}


@pytest.mark.parametrize(("start", "to"), sorted(MOVES))
def test_every_allowed_move_is_made(start, to):
    lifecycle = at(start)
    lifecycle.move(to, "because")
    assert (to, "because") == (lifecycle.phase, lifecycle.reason)


@pytest.mark.parametrize(
    ("start", "to"),
    sorted((a, b) for a, b in itertools.product(Phase, Phase) if a != b and (a, b) not in MOVES),
)
def test_every_other_move_is_refused_by_name(start, to):
    lifecycle = at(start)
    with pytest.raises(InvalidTransition, match=f"{start} -> {to}"):
        lifecycle.move(to, "because")
    assert start is lifecycle.phase


def test_reads_are_served_only_while_serving_or_draining():
    for phase in Phase:
        lifecycle = at(phase)
        if phase in (P.SERVING, P.DRAINING):
            lifecycle.check_reads()
        else:
            with pytest.raises(NotSynced):
                lifecycle.check_reads()


def test_a_sync_ends_syncing_only():
    """`synced` serves reads when waiting for them; anti-entropy calling it later changes
    nothing, and a draining node stays draining."""
    syncing = at(P.SYNCING)
    syncing.still_syncing("no peer yet")
    assert (P.SYNCING, "no peer yet") == (syncing.phase, syncing.reason)
    syncing.synced("copied")
    assert (P.SERVING, "copied") == (syncing.phase, syncing.reason)
    for phase in (P.SERVING, P.DRAINING):
        lifecycle = at(phase)
        lifecycle.synced("late")
        lifecycle.still_syncing("late")
        assert (phase, "on the way") == (lifecycle.phase, lifecycle.reason)


def test_entering_a_phase_calls_what_waits_for_it():
    lifecycle, called = Lifecycle(), []
    lifecycle.on_enter(P.DRAINING, lambda: called.append(lifecycle.phase))
    lifecycle.move(P.SERVING, "up")
    lifecycle.move(P.DRAINING, "down")
    lifecycle.move(P.DRAINING, "still down")  # the same phase: no second call
    assert [P.DRAINING] == called


@pytest.mark.slow
async def test_a_real_process_syncs_serves_and_drains(servers):
    """A node whose one peer never answers: SYNCING (503) until its empty-sync window ends,
    then SERVING (200); SIGTERM drains and stops it, and it exits 0."""
    peer = f"http://127.0.0.1:{free_port()}/eureka/"
    server = servers.new(
        args=["--peers", peer],
        peers__sync_budget=0.5,
        peers__sync_empty_window=3,
        logging__format="json",
    )
    phases: list[tuple[int, str]] = []

    async def readyz() -> tuple[int, str]:
        try:
            async with session.get(f"{server.base}/readyz") as response:
                seen = (response.status, (await response.json())["phase"])
        except aiohttp.ClientConnectionError:
            return 0, "not listening"
        if not phases or phases[-1] != seen:
            phases.append(seen)
        return seen

    await server.start(ready=None)
    async with aiohttp.ClientSession() as session:
        await eventually(readyz, lambda seen: seen[1] == "SERVING", timeout=READY_TIMEOUT)
    assert 0 == await server.stop()
    assert [(503, "SYNCING"), (200, "SERVING")] == phases
    entered = [e["phase"] for e in await server.log_lines() if "phase" in e]
    assert ["RESTORING", "SYNCING", "SERVING", "DRAINING", "STOPPED"] == entered


async def test_a_request_still_running_does_not_hold_the_stop(servers):
    """A registration whose body has half arrived holds its handler for the body's 10 s;
    SIGTERM stops the process within SHUTDOWN_TIMEOUT (5 s) all the same, and the log says
    which request it waited for (aiohttp's own default waits a minute)."""
    server = servers.new(logging__format="json")
    await server.start()
    host, port = server.base.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /eureka/apps/ORDERS HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"instance":'
    )
    await writer.drain()
    await asyncio.sleep(0.5)  # the handler is reading the body
    started = asyncio.get_running_loop().time()
    assert 0 == await server.stop(timeout=20)
    took = asyncio.get_running_loop().time() - started
    writer.close()
    assert took < 9, took  # the body's deadline (10 s) did not decide it
    waited = [
        e for e in await server.log_lines() if e.get("event") == "shutdown_waits_for_requests"
    ]
    assert ["POST /eureka/apps/ORDERS"] == waited[0]["requests"]


@pytest.fixture
async def store_dir(tmp_path: Path) -> Path:
    """A data directory with a store in it, for another connection to lock."""
    await (await Store.open(tmp_path / "registry.db", now_ms=0)).close()
    return tmp_path


def store_settings(data_dir: Path, busy_timeout: float) -> dict[str, object]:
    return {
        "store__data_dir": data_dir,
        "store__busy_timeout": busy_timeout,
        "logging__format": "json",
    }


@pytest.mark.slow
async def test_a_signal_while_restoring_stops_what_had_started(servers, store_dir):
    """SIGTERM while the store is still being read (another process holds its lock): the
    start goes no further, what it had started stops, last first, and the process exits 0
    with nothing but its log lines (`log_lines` reads each as JSON: a traceback fails it)."""
    async with locked(store_dir / "registry.db", exclusive=True):
        server = await servers.start(ready=None, **store_settings(store_dir, 3))
        await server.wait_logged("phase_entered", phase="RESTORING")
        assert 0 == await server.stop()
    lines = await server.log_lines()
    entered = [(e["phase"], e["reason"]) for e in lines if "phase" in e]
    assert [P.RESTORING, P.DRAINING, P.STOPPED] == [phase for phase, _ in entered]
    assert entered[1][1].startswith("stopped while RESTORING: reading ")
    assert "server_stopped" == lines[-1]["event"]


@pytest.mark.slow
async def test_a_failing_store_stops_cleanly(servers, store_dir):
    """A store locked by another process from start to end: the server serves from memory,
    degraded, and SIGTERM still drains and stops it, exit 0, its writes logged as owed."""
    async with locked(store_dir / "registry.db", exclusive=True):
        # Not ready (/readyz): degraded. It answers /healthz.
        server = await servers.start(ready="/healthz", **store_settings(store_dir, 0.1))
        base = server.eureka
        async with aiohttp.ClientSession() as session:
            doc = {"instance": instance_doc()}
            async with session.post(f"{base}apps/ORDERS", json=doc) as response:
                assert 204 == response.status
            overridden = f"{base}apps/ORDERS/i-1/status?value=OUT_OF_SERVICE"
            async with session.put(overridden) as response:
                assert 503 == response.status  # in force, not on disk: said so
        assert 0 == await server.stop()
    lines = await server.log_lines()
    events = [e["event"] for e in lines]
    assert "store_failed" in events
    assert [P.DRAINING, P.STOPPED] == [e["phase"] for e in lines if "phase" in e][-2:]
    assert "server_stopped" == events[-1]


@pytest.mark.slow
async def test_a_start_that_fails_stops_what_had_started(store_dir):
    """The port is taken: the store opened by the start is closed again (SQLite removes
    the WAL file when its last connection closes), the phases end in STOPPED, and the process
    exits 1 saying why."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = await run("serve", "--port", str(port), settings=store_settings(store_dir, 0.1))
    assert 1 == done.returncode
    *logged, said = done.stderr.splitlines()
    lines = [json.loads(line) for line in logged]
    assert said.startswith("service-registry: ")
    assert [P.DRAINING, P.STOPPED] == [e["phase"] for e in lines if "phase" in e][-2:]
    assert "server_failed" == lines[-1]["event"]
    wal = store_dir / "registry.db-wal"
    assert not await asyncio.to_thread(wal.exists)  # the store was closed, not dropped
