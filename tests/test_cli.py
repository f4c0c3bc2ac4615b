"""`python -m registry serve` as a real process: it serves, and stops cleanly on a signal."""

from __future__ import annotations

import asyncio
import signal
import sqlite3

import aiohttp
import pytest

from registry.store import schema
from tests.helpers import JSON, eventually, free_port, instance_doc
from tests.processes import run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_serves_then_stops_on_a_signal(sig, servers):
    """The CLI serves the API on the given port and exits 0 after a signal, logging JSON."""
    server = await servers.start(ready="/eureka/apps")
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{server.eureka}apps/CLI",
            json={
                "instance": {
                    "hostName": "h",
                    "app": "CLI",
                    "ipAddr": "1.2.3.4",
                    "dataCenterInfo": {"name": "MyOwn"},
                }
            },
        ) as response,
    ):
        assert 204 == response.status
    assert 0 == await server.stop(sig)
    lines = await server.log_lines()
    events = [" ".join(filter(None, (e["event"], e.get("phase")))) for e in lines]
    assert [
        "server_starting",
        "phase_entered RESTORING",
        "store_migrated",  # a new ./data/registry.db in the test's own directory
        "store_restored",
        "phase_entered SERVING",
        "phase_entered DRAINING",  # the signal
        "registry_activity",  # the registration, summed up at shutdown
        "phase_entered STOPPED",
        "server_stopped",
    ] == events


async def test_a_shutdown_delay_serves_on_not_ready_until_it_ends(servers):
    """After SIGTERM with `shutdown_delay`, /readyz answers 503 (shutting down) while reads
    and registrations are still answered; a second signal ends the delay, and the node drains
    and exits 0 (long before the 60 s the delay would take)."""
    server = await servers.start(server__shutdown_delay=60, store__enabled="false")
    server.send_signal(signal.SIGTERM)
    async with aiohttp.ClientSession() as session:

        async def readiness() -> tuple[int, dict]:
            async with session.get(f"{server.base}/readyz") as response:
                return response.status, await response.json()

        _, body = await eventually(readiness, lambda r: r[0] == 503, what="not ready")
        assert ["shutting down"] == body["reasons"]
        async with session.post(
            f"{server.eureka}apps/LATE", json={"instance": instance_doc("LATE", "h1")}
        ) as response:
            assert 204 == response.status
        async with session.get(f"{server.eureka}apps/LATE", headers=JSON) as response:
            assert 200 == response.status
        async with session.get(f"{server.eureka}status", headers=JSON) as response:
            stats = (await response.json())["generalStats"]
            assert ("SERVING", "shutting down: serving for 60 s more while routes move away") == (
                stats["phase"],
                stats["shutting-down"],
            )
    assert 0 == await server.stop(signal.SIGTERM, timeout=10)


async def test_bad_settings_stop_start_up_naming_the_key():
    """A bad environment value exits 2 with the key in the message."""
    done = await run("serve", settings={"server__port": "eighty"})
    assert 2 == done.returncode
    assert "server.port: Expected int, got str (given 'eighty')" in done.stderr


async def test_a_public_bind_without_credentials_stops_start_up():
    """Exit 2, naming the settings that would make it safe, and the insecure way out."""
    done = await run("serve", "--host", "0.0.0.0")
    assert 2 == done.returncode
    for setting in ("credentials.clients", "credentials.admins", "insecure_public_bind"):
        assert setting in done.stderr


async def test_a_store_from_a_newer_server_stops_start_up(tmp_path):
    """A database with a newer schema is refused, not misread: exit 2, saying why."""

    def newer() -> None:
        (tmp_path / "data").mkdir()
        db = sqlite3.connect(tmp_path / "data" / "registry.db")
        db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        db.execute("INSERT INTO schema_version VALUES (99)")
        db.commit()
        db.close()

    await asyncio.to_thread(newer)
    done = await run("serve", "--port", str(free_port()))  # ./data: the test's directory
    assert 2 == done.returncode
    assert f"schema version 99, newer than this server's {schema.VERSION}" in done.stderr


async def test_a_corrupt_store_stops_start_up_when_told_to(tmp_path):
    """refuse_corrupt_store: exit 2, saying why, the file left as it was."""
    garbage = b"not a database" * 100

    def corrupt() -> None:
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "registry.db").write_bytes(garbage)

    await asyncio.to_thread(corrupt)
    done = await run("serve", "--port", str(free_port()), settings={"store__refuse_corrupt": True})
    assert 2 == done.returncode
    assert "is not a sound database" in done.stderr
    assert garbage == await asyncio.to_thread((tmp_path / "data" / "registry.db").read_bytes)


async def test_a_second_server_on_one_data_directory_stops_start_up(servers):
    """Two servers on one directory would each restore, serve and evict their own half, and
    a restart would bring back the union: the second exits 2, naming the first's process."""
    first = await servers.start(ready="/eureka/apps")  # ./data: the test's directory
    second = await run("serve", "--port", str(free_port()))
    assert 2 == second.returncode
    assert f"is in use by process {first.pid}" in second.stderr
    assert first.running  # the first serves on
