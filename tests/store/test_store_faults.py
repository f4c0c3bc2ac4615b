"""The server with its store failing for real: clients notice nothing, status says degraded."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from registry import Settings, create_app
from registry.appkeys import WRITER
from registry.store.sqlite import CorruptStore, Store
from tests.factories import T0
from tests.helpers import JSON, eventually, fetch_json, locked, register
from tests.privileged import unavailable


@pytest.fixture
def settings() -> Settings:
    return Settings.of(store__busy_timeout=0.05)


async def store_status(client) -> dict:
    return (await fetch_json(client, "/eureka/status"))["store"]


class TestLockedStore:
    async def test_clients_are_served_while_the_store_is_locked_and_it_catches_up(self, client):
        await register(client)
        writer = client.app[WRITER]
        await writer.flush()
        async with locked(writer.path):
            await register(client, iid="i-2")
            assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status
            assert 200 == (await client.get("/eureka/apps", headers=JSON)).status
            response = await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
            body = await response.json()
            assert (503, "store_unavailable") == (response.status, body["error"])
            assert "in force on this node" in body["detail"]
            doc = await fetch_json(client, "/eureka/apps/ORDERS/i-1")
            assert "OUT_OF_SERVICE" == doc["instance"]["status"]
            status = await store_status(client)
            assert status["degraded"] is True
            assert "locked" in status["last-error"]
        await writer.flush()
        assert (await store_status(client))["degraded"] is False
        store = await Store.open(writer.path, now_ms=T0)
        snapshot = await store.load()
        await store.close()
        assert {"i-1", "i-2"} == {i.instance_id for i in snapshot.instances}
        assert ["i-1"] == [o.instance_id for o in snapshot.overrides]


class TestStoreOff:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(store__enabled=False)

    async def test_status_says_so(self, client):
        assert {"enabled": False} == await store_status(client)
        assert client.app[WRITER] is None


def mount(*args: str) -> bool:
    """Run mount(8); whether it worked (it needs root: tests/privileged.py)."""
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


@pytest.fixture
async def tmpfs(tmp_path: Path) -> AsyncIterator[Path]:
    """A small filesystem of the test's own, which it can make read-only."""
    where = tmp_path / "mnt"
    await asyncio.to_thread(where.mkdir)
    if not await asyncio.to_thread(mount, "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)):
        unavailable("mounting a tmpfs needs root")
    try:
        yield where
    finally:
        await asyncio.to_thread(subprocess.run, ["umount", "-l", str(where)], check=False)


def fill(where: Path) -> Path:
    """Fill the filesystem at `where` to the last byte; the file that does it."""
    filler = where / "filler"
    with filler.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


class TestFullDisk:
    async def test_a_full_disk_degrades_and_recovers(self, aiohttp_client, clock, tmpfs):
        client = await aiohttp_client(
            create_app(Settings.of(store__data_dir=str(tmpfs)), clock=clock)
        )
        await register(client)
        writer = client.app[WRITER]
        await writer.flush()
        filler = await asyncio.to_thread(fill, tmpfs)
        big = {f"k{n}": "v" * 500 for n in range(100)}  # pages the WAL has no room for
        for n in range(20):
            await register(client, iid=f"i-{n + 2}", metadata=big)
        with pytest.raises(sqlite3.Error, match="full"):
            await writer.flush()
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-2")).status
        assert 200 == (await client.get("/eureka/apps", headers=JSON)).status
        assert (await store_status(client))["degraded"] is True
        await asyncio.to_thread(filler.unlink)
        await writer.flush()
        assert (await store_status(client))["degraded"] is False
        store = await Store.open(writer.path, now_ms=T0)
        snapshot = await store.load()
        await store.close()
        assert 21 == len(snapshot.instances)


def chattr(flag: str, path: Path) -> bool:
    """Set or clear the immutable attribute (root, on a file system that has it); whether it
    worked."""
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


class TestReadOnlyDirectory:
    async def test_a_read_only_data_directory_at_start_is_merged_once_writable(
        self, aiohttp_client, clock, tmp_path
    ):
        """The node starts from memory (degraded) while its data directory cannot be written;
        once it can, what the store kept comes back and this run's changes are written."""
        data = tmp_path / "data"
        first = await aiohttp_client(
            create_app(Settings.of(store__data_dir=str(data)), clock=clock)
        )
        await register(first, iid="kept")
        await first.close()
        if not await asyncio.to_thread(chattr, "+i", data):
            unavailable("chattr +i needs root and a file system that has it")
        try:
            client = await aiohttp_client(
                create_app(Settings.of(store__data_dir=str(data)), clock=clock)
            )
            await register(client, iid="new")
            assert 200 == (await client.put("/eureka/apps/ORDERS/new")).status
            assert (await store_status(client))["degraded"] is True
        finally:
            await asyncio.to_thread(chattr, "-i", data)
        await client.app[WRITER].flush()
        assert (await store_status(client))["degraded"] is False
        doc = await fetch_json(client, "/eureka/apps/ORDERS")
        assert {"kept", "new"} == {i["instanceId"] for i in doc["application"]["instance"]}


class TestCorruptStore:
    """A database that is not sound at start-up: moved aside and said so where operators
    look, or, when told to, the start refused and the file left alone."""

    GARBAGE = b"this is not a database at all" * 100

    async def corrupt(self, tmp_path: Path) -> Path:
        data = tmp_path / "data"
        await asyncio.to_thread(data.mkdir)
        await asyncio.to_thread((data / "registry.db").write_bytes, self.GARBAGE)
        return data

    async def test_moved_aside_and_said_so(self, aiohttp_client, clock, tmp_path):
        data = await self.corrupt(tmp_path)
        with capture_logs() as logs:
            client = await aiohttp_client(
                create_app(Settings.of(store__data_dir=str(data)), clock=clock)
            )
        aside = data / f"registry.db.corrupt-{clock.wall_ms()}"
        assert self.GARBAGE == await asyncio.to_thread(aside.read_bytes)
        (logged,) = [e for e in logs if e["event"] == "store_corrupt_moved_aside"]
        assert ("error", str(aside)) == (logged["log_level"], logged["moved_to"])
        moved = (await store_status(client))["corrupt-moved-aside"]
        assert (str(aside), clock.wall_ms()) == (moved["path"], moved["at"])
        # Not ready while clients register again: no peer to copy, and nothing restored.
        closed = await client.get("/readyz")
        assert (503, "SYNCING") == (closed.status, (await closed.json())["phase"])
        assert ["store lost: clients register again"] == (await closed.json())["reasons"]
        assert 403 == (await client.get("/eureka/apps")).status
        await register(client, iid="back")
        await clock.advance(Settings().peers.sync_empty_window)
        ready = await client.get("/readyz")
        body = await ready.json()
        assert 200 == ready.status  # then it serves: what it lost stays a warning
        assert ["store was corrupt: started without what it held"] == body["warnings"]
        metrics = await (await client.get("/metrics")).text()
        assert "registry_store_corrupt_moved_aside 1.0" in metrics
        assert "started empty" in await (await client.get("/")).text()

    async def test_served_empty_at_once_when_told_to(self, aiohttp_client, clock, tmp_path):
        data = await self.corrupt(tmp_path)
        settings = Settings.of(store__data_dir=str(data), store__serve_empty=True)
        client = await aiohttp_client(create_app(settings, clock=clock))
        assert 200 == (await client.get("/readyz")).status

    async def test_refused_when_told_to(self, clock, tmp_path):
        data = await self.corrupt(tmp_path)
        app = create_app(
            Settings.of(store__data_dir=str(data), store__refuse_corrupt=True), clock=clock
        )
        runner = web.AppRunner(app)
        with pytest.raises(CorruptStore, match="not a sound database"):
            await runner.setup()
        await runner.cleanup()
        left = await asyncio.to_thread(lambda: sorted(data.iterdir()))
        assert [data / "registry.db", data / "registry.lock"] == left  # nothing moved aside
        assert self.GARBAGE == await asyncio.to_thread((data / "registry.db").read_bytes)


class TestReadiness:
    async def test_ready_until_the_store_degrades_and_again_after(self, client):
        assert 200 == (await client.get("/healthz")).status
        response = await client.get("/readyz")
        assert (200, {"ready": True, "phase": "SERVING", "reasons": [], "warnings": []}) == (
            response.status,
            await response.json(),
        )
        await register(client)
        writer = client.app[WRITER]
        async with locked(writer.path):
            await register(client, iid="i-2")
            with pytest.raises(sqlite3.Error):
                await writer.flush()
            response = await client.get("/readyz")
            body = await response.json()
            assert (503, False) == (response.status, body["ready"])
            assert ["store failing"] == body["reasons"]
            assert 200 == (await client.get("/healthz")).status
        await writer.flush()
        assert 200 == (await client.get("/readyz")).status

    @pytest.mark.parametrize("settings", [Settings.of(peers__urls=("http://127.0.0.1:9/eureka/",))])
    async def test_not_ready_while_reads_wait_for_peers(self, client, settings):
        """/readyz, open to anyone, says why in fixed words; which peers failed, and how, is
        GET status's (a node syncing from 300 unreachable peers answered 26 KB of them)."""

        async def reads_reason() -> str:
            return (await fetch_json(client, "/eureka/status"))["generalStats"]["reads-reason"]

        await eventually(reads_reason, lambda reason: "127.0.0.1:9" in reason)
        response = await client.get("/readyz")
        body = await response.json()
        assert (503, False) == (response.status, body["ready"])
        assert "SYNCING" == body["phase"]
        assert ["syncing with peers"] == body["reasons"]
        assert b"127.0.0.1" not in await response.read()
