"""`python -m registry serve` as a real process: it serves, and stops cleanly on a signal."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import sys
from asyncio.subprocess import Process
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from registry.store import schema
from tests.helpers import free_port

POLL = 0.05
TIMEOUT = 20.0

pytestmark = pytest.mark.slow


async def start(*args: str, env: dict[str, str] | None = None) -> Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "registry",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


@contextlib.asynccontextmanager
async def serving(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Process]:
    """`python -m registry *args` as a process, killed on the way out if it still runs."""
    process = await start(*args, env=env)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def stop(process: Process, sig: int = signal.SIGTERM) -> list[dict[str, Any]]:
    """Send `sig`, wait for the process to exit; the JSON lines it logged."""
    process.send_signal(sig)
    _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT)
    return [json.loads(line) for line in stderr.decode().splitlines()]


async def wait_serving(session: aiohttp.ClientSession, url: str) -> None:
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while True:
        try:
            async with session.get(url) as response:
                if response.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        assert asyncio.get_running_loop().time() < deadline, "the server never started"
        await asyncio.sleep(POLL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_serves_then_stops_on_a_signal(sig):
    """The CLI serves the API on the given port and exits 0 after a signal, logging JSON."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/eureka"
    async with serving("serve", "--port", str(port)) as process:
        async with aiohttp.ClientSession() as session:
            await wait_serving(session, f"{base}/apps")
            async with session.post(
                f"{base}/apps/CLI",
                json={
                    "instance": {
                        "hostName": "h",
                        "app": "CLI",
                        "ipAddr": "1.2.3.4",
                        "dataCenterInfo": {"name": "MyOwn"},
                    }
                },
            ) as response:
                assert 204 == response.status
        lines = await stop(process, sig)
    assert 0 == process.returncode
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


async def test_bad_settings_stop_start_up_naming_the_key():
    """A bad environment value exits 2 with the key in the message."""
    process = await start("serve", env={"REGISTRY_PORT": "eighty", "PATH": ""})
    _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert 2 == process.returncode
    assert "port: 'eighty' is not a valid int" in stderr.decode()


async def test_a_public_bind_without_credentials_stops_start_up():
    """Exit 2, naming the settings that would make it safe, and the insecure way out."""
    process = await start("serve", "--host", "0.0.0.0", env={"PATH": ""})
    _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert 2 == process.returncode
    for setting in ("client_credentials", "admin_credentials", "insecure_public_bind"):
        assert setting in stderr.decode()


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
    process = await start("serve", "--port", str(free_port()))  # ./data: the test's directory
    _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert 2 == process.returncode
    assert f"schema version 99, newer than this server's {schema.VERSION}" in stderr.decode()


async def test_a_corrupt_store_stops_start_up_when_told_to(tmp_path):
    """refuse_corrupt_store: exit 2, saying why, the file left as it was."""
    garbage = b"not a database" * 100

    def corrupt() -> None:
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "registry.db").write_bytes(garbage)

    await asyncio.to_thread(corrupt)
    env = {**os.environ, "REGISTRY_REFUSE_CORRUPT_STORE": "true"}
    process = await start("serve", "--port", str(free_port()), env=env)
    _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert 2 == process.returncode
    assert "is not a sound database" in stderr.decode()
    assert garbage == await asyncio.to_thread((tmp_path / "data" / "registry.db").read_bytes)


async def test_a_second_server_on_one_data_directory_stops_start_up():
    """Two servers on one directory would each restore, serve and evict their own half, and
    a restart would bring back the union: the second exits 2, naming the first's process."""
    port = free_port()
    async with serving("serve", "--port", str(port)) as first:  # ./data: the test's directory
        async with aiohttp.ClientSession() as session:
            await wait_serving(session, f"http://127.0.0.1:{port}/eureka/apps")
        second = await start("serve", "--port", str(free_port()))
        _, stderr = await asyncio.wait_for(second.communicate(), TIMEOUT)
        assert 2 == second.returncode
        assert f"is in use by process {first.pid}" in stderr.decode()
        assert first.returncode is None  # the first serves on
