"""SIGHUP on a real process: the settings file read again, credentials included."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from registry.codec.wire import basic_authorization
from tests.helpers import eventually
from tests.processes import ServerProcess

pytestmark = pytest.mark.slow

KEPT, REMOVED = "svc:kept-pw", "old:removed-pw"


def config(*clients: str) -> str:
    listed = ", ".join(f'"{c}"' for c in clients)
    return f'[credentials]\nclients = [{listed}]\nadmins = ["ops:admin-pw"]\n'


async def status_as(session: aiohttp.ClientSession, port: int, credential: str) -> int:
    headers = {"Authorization": basic_authorization(credential), "Accept": "application/json"}
    async with session.get(f"http://127.0.0.1:{port}/eureka/apps", headers=headers) as response:
        return response.status


async def reloaded(server: ServerProcess, path: Path, text: str) -> dict[str, Any]:
    """Write `text` to the settings file, send SIGHUP, and wait for the reload's log line."""
    await asyncio.to_thread(path.write_text, text)
    server.send_signal(signal.SIGHUP)
    return await server.wait_logged("settings_reloaded")


async def test_a_removed_client_credential_is_refused_after_sighup(servers, tmp_path):
    path = tmp_path / "node.toml"
    await asyncio.to_thread(path.write_text, config(KEPT, REMOVED))
    server = await servers.start(args=["--config", str(path)], ready=None, logging__format="json")
    async with aiohttp.ClientSession() as session:
        await eventually(lambda: _answers(session, server.port, REMOVED), lambda s: s == 200)
        await reloaded(server, path, config(KEPT))
        assert 401 == await status_as(session, server.port, REMOVED)
        assert 200 == await status_as(session, server.port, KEPT)
    assert 0 == await server.stop()
    lines = await server.log_lines()
    assert "applied" == lines_of(lines, "settings_reloaded")["credentials"]
    assert not any(REMOVED.split(":")[1] in str(e) for e in lines)  # never logged


async def test_turning_credentials_on_needs_a_restart(servers, tmp_path):
    """A node started without credentials guards no route: a SIGHUP adding some is refused
    with a warning saying so, and the node goes on as it was."""
    path = tmp_path / "node.toml"
    await asyncio.to_thread(path.write_text, "")
    server = await servers.start(args=["--config", str(path)], ready=None, logging__format="json")
    async with aiohttp.ClientSession() as session:
        await eventually(lambda: _answers(session, server.port, KEPT), lambda s: s == 200)
        await reloaded(server, path, config(KEPT))
        assert 200 == await _answers(session, server.port, "anyone:at-all")
    assert 0 == await server.stop()
    lines = await server.log_lines()
    assert "restart it to turn them on" in lines_of(lines, "credentials_not_reloaded")["reason"]
    assert "kept" == lines_of(lines, "settings_reloaded")["credentials"]


def lines_of(lines: list[dict[str, Any]], event: str) -> dict[str, Any]:
    return next(e for e in lines if e["event"] == event)


async def _answers(session: aiohttp.ClientSession, port: int, credential: str) -> int:
    try:
        return await status_as(session, port, credential)
    except aiohttp.ClientConnectionError:
        return 0


async def test_a_changed_peer_dns_says_it_takes_a_restart(servers, tmp_path):
    """peer_dns and its settings are read at start: a SIGHUP changing them warns so."""
    path = tmp_path / "node.toml"
    await asyncio.to_thread(path.write_text, "")
    server = await servers.start(args=["--config", str(path)], ready=None, logging__format="json")
    await server.wait_ready()
    await reloaded(server, path, '[peers]\ndns_name = "registry-peers.test"\n')
    assert 0 == await server.stop()
    lines = await server.log_lines()
    assert "take a restart" in lines_of(lines, "peer_dns_not_reloaded")["reason"]
