"""SIGHUP on a real process: the settings file read again, credentials included."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from registry.codec.wire import basic_authorization
from tests.helpers import eventually, free_port
from tests.test_cli import TIMEOUT, serving, stop

pytestmark = pytest.mark.slow

KEPT, REMOVED = "svc:kept-pw", "old:removed-pw"


def config(*clients: str) -> str:
    listed = ", ".join(f'"{c}"' for c in clients)
    return f'client_credentials = [{listed}]\nadmin_credentials = ["ops:admin-pw"]\n'


async def status_as(session: aiohttp.ClientSession, port: int, credential: str) -> int:
    headers = {"Authorization": basic_authorization(credential), "Accept": "application/json"}
    async with session.get(f"http://127.0.0.1:{port}/eureka/apps", headers=headers) as response:
        return response.status


async def reloaded(
    process: asyncio.subprocess.Process, path: Path, text: str
) -> list[dict[str, Any]]:
    """Write `text` to the settings file, send SIGHUP, and read the log up to the reload's
    line; the lines read."""
    await asyncio.to_thread(path.write_text, text)
    process.send_signal(signal.SIGHUP)
    assert process.stderr is not None
    lines = []
    while not lines or lines[-1]["event"] != "settings_reloaded":
        line = await asyncio.wait_for(process.stderr.readline(), TIMEOUT)
        assert line, "the server ended before reloading"
        lines.append(json.loads(line))
    return lines


def environment(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "REGISTRY_DATA_DIR": str(tmp_path), "REGISTRY_LOG_FORMAT": "json"}


async def test_a_removed_client_credential_is_refused_after_sighup(tmp_path):
    path, port = tmp_path / "node.toml", free_port()
    await asyncio.to_thread(path.write_text, config(KEPT, REMOVED))
    args = ("serve", "--port", str(port), "--config", str(path))
    async with serving(*args, env=environment(tmp_path)) as process:
        async with aiohttp.ClientSession() as session:
            await eventually(lambda: _answers(session, port, REMOVED), lambda s: s == 200)
            lines = await reloaded(process, path, config(KEPT))
            assert 401 == await status_as(session, port, REMOVED)
            assert 200 == await status_as(session, port, KEPT)
        lines += await stop(process)
    assert "applied" == lines_of(lines, "settings_reloaded")["credentials"]
    assert not any(REMOVED.split(":")[1] in str(e) for e in lines)  # never logged


async def test_turning_credentials_on_needs_a_restart(tmp_path):
    """A node started without credentials guards no route: a SIGHUP adding some is refused
    with a warning saying so, and the node goes on as it was."""
    path, port = tmp_path / "node.toml", free_port()
    await asyncio.to_thread(path.write_text, "")
    args = ("serve", "--port", str(port), "--config", str(path))
    async with serving(*args, env=environment(tmp_path)) as process:
        async with aiohttp.ClientSession() as session:
            await eventually(lambda: _answers(session, port, KEPT), lambda s: s == 200)
            lines = await reloaded(process, path, config(KEPT))
            assert 200 == await _answers(session, port, "anyone:at-all")
        lines += await stop(process)
    assert "restart it to turn them on" in lines_of(lines, "credentials_not_reloaded")["reason"]
    assert "kept" == lines_of(lines, "settings_reloaded")["credentials"]


def lines_of(lines: list[dict[str, Any]], event: str) -> dict[str, Any]:
    return next(e for e in lines if e["event"] == event)


async def _answers(session: aiohttp.ClientSession, port: int, credential: str) -> int:
    try:
        return await status_as(session, port, credential)
    except aiohttp.ClientConnectionError:
        return 0
