"""Warm restarts in process: two runs of the app on the same data directory and fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

from registry import Settings, create_app
from registry.appkeys import CATALOG
from registry.codec import Format
from registry.reads.upkeep import CATALOG_REFRESH
from registry.store.keeping import READ_FORMATS_INTERVAL
from tests.helpers import JSON, eventually, fetch_json, register

UNREACHABLE_PEER = "http://127.0.0.1:9/eureka/"  # the discard port: nothing answers


async def restarted(aiohttp_client, clock, settings: Settings, before) -> object:
    """Run the app, let `before` act on it, stop it (writing what it owes), start it again."""
    first = await aiohttp_client(create_app(settings, clock=clock))
    await before(first)
    await first.close()
    return await aiohttp_client(create_app(settings, clock=clock))


def remembered() -> bool:
    """Whether the store in ./data (each test runs in a directory of its own) holds XML as the
    format read; its transaction runs in the store's thread."""
    with contextlib.closing(sqlite3.connect(Path("data") / "registry.db")) as db:
        row = db.execute("SELECT value FROM meta WHERE key = 'read_formats'").fetchone()
    return row is not None and row[0] == Format.XML.value


class TestWarmRestart:
    async def test_restored_leases_get_a_full_duration(self, aiohttp_client, clock):
        """Down for a minute: instances come back with a fresh 90 s lease, so a live one that
        renews stays and a dead one goes a lease later, as any silent instance does."""

        async def before(client):
            await register(client, iid="alive")
            await register(client, iid="dead")

        client = await restarted(aiohttp_client, clock, Settings(), before)
        await clock.advance(60)
        assert 200 == (await client.put("/eureka/apps/ORDERS/alive")).status
        await clock.advance(60)
        assert 200 == (await client.put("/eureka/apps/ORDERS/alive")).status
        await clock.advance(40)  # the dead one's restored lease ran out at 150 s
        doc = await fetch_json(client, "/eureka/apps/ORDERS")
        assert ["alive"] == [i["instanceId"] for i in doc["application"]["instance"]]

    async def test_the_formats_being_read_are_prepared_as_it_starts(self, aiohttp_client, clock):
        """Clients read gzip XML before the restart: after it, the XML blocks are joined
        within a second of serving, before any read (clients failing over read at once);
        JSON, which nobody read, is not encoded."""

        async def before(client):
            for n in range(3):
                await register(client, iid=f"i-{n}")
            xml = {"Accept": "application/xml", "Accept-Encoding": "gzip"}
            assert 200 == (await client.get("/eureka/apps/", headers=xml)).status
            await clock.advance(READ_FORMATS_INTERVAL)
            await eventually(lambda: asyncio.to_thread(remembered), what="the formats stored")

        client = await restarted(aiohttp_client, clock, Settings(), before)
        catalog = client.app[CATALOG]
        assert (0, [Format.XML]) == (catalog.encoded, catalog.read_formats(now=clock.monotonic()))
        await clock.advance(CATALOG_REFRESH)
        await eventually(lambda: catalog.encoded == 3, what="the XML encoded")

    async def test_the_index_goes_on_and_old_indexes_are_refused(self, aiohttp_client, clock):
        """Delta versions never go back; a long-poll from before the restart must re-fetch."""
        seen = {}

        async def before(client):
            for n in range(3):
                await register(client, iid=f"i-{n}")
            response = await client.get("/eureka/apps", headers=JSON)
            seen["index"] = int(response.headers["X-Registry-Index"])
            seen["epoch"] = response.headers["X-Registry-Epoch"]

        client = await restarted(aiohttp_client, clock, Settings(), before)
        response = await client.get("/eureka/apps/delta", headers=JSON)
        assert int((await response.json())["applications"]["versions__delta"]) > seen["index"]
        assert seen["epoch"] != response.headers["X-Registry-Epoch"]
        old = await client.get(f"/eureka/apps/delta?index={seen['index']}")
        assert 410 == old.status

    async def test_a_node_with_stored_state_serves_at_once_despite_its_peers(
        self, aiohttp_client, clock
    ):
        """No waiting for peers nobody can reach: what it kept is served straight away."""

        async def before(client):
            await register(client)

        settings = Settings.of(peers__urls=(UNREACHABLE_PEER,))
        client = await restarted(aiohttp_client, clock, settings, before)
        await asyncio.sleep(0)
        response = await client.get("/eureka/apps", headers=JSON)
        assert 200 == response.status
        status = await fetch_json(client, "/eureka/status")
        assert status["generalStats"]["reads-reason"].startswith("restored 1 instances")

    async def test_without_stored_state_the_node_waits_for_its_peers(self, aiohttp_client, clock):
        client = await aiohttp_client(
            create_app(Settings.of(peers__urls=(UNREACHABLE_PEER,)), clock=clock)
        )
        assert 403 == (await client.get("/eureka/apps")).status
