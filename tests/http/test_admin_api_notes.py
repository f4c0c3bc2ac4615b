"""Overrides with a reason and an expiry, their list, their history, and their expiry by clock."""

from __future__ import annotations

import pytest

from registry import Settings, create_app
from registry.appkeys import WRITER
from tests.helpers import fetch_json, register

HOUR_MS = 3_600_000


async def overrides(client) -> list[dict]:
    return (await fetch_json(client, "/eureka/overrides"))["overrides"]


async def history(client) -> list[tuple]:
    await client.app[WRITER].flush()
    doc = await fetch_json(client, "/eureka/overrides/history")
    return [(h["action"], h["instance_id"], h["status"], h["reason"]) for h in doc["history"]]


class TestReasonAndExpiry:
    async def test_an_override_shows_why_since_when_and_until_when(self, client, clock):
        await register(client)
        response = await client.put(
            "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=disk+replacement&expires=8h"
        )
        assert 200 == response.status
        now = clock.wall_ms()
        assert [
            {
                "app": "ORDERS",
                "instanceId": "i-1",
                "status": "OUT_OF_SERVICE",
                "reason": "disk replacement",
                "setAt": now,
                "setBy": None,  # no credentials configured: nobody to name
                "expiresAt": now + 8 * HOUR_MS,
            }
        ] == await overrides(client)

    async def test_an_iso_expiry_with_its_offset(self, client, clock):
        await register(client)
        at = "2025-01-01T02:00:00%2B01:00"  # (the fake clock starts on 2024-12-31 23:50 UTC)
        assert (
            200
            == (await client.put(f"/eureka/apps/ORDERS/i-1/status?value=DOWN&expires={at}")).status
        )
        assert 1_735_693_200_000 == (await overrides(client))[0]["expiresAt"]

    async def test_an_override_set_again_without_a_reason_loses_the_old_one(self, client):
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=DOWN&reason=first")
        await client.put("/eureka/apps/ORDERS/i-1/status?value=DOWN")
        assert [None] == [o["reason"] for o in await overrides(client)]

    @pytest.mark.parametrize(
        ("query", "field"),
        [
            ("expires=yesterday", "expires"),
            ("expires=2020-01-01T00:00:00Z", "expires"),  # in the past
            ("expires=2030-01-01T00:00:00", "expires"),  # no offset
            ("expires=0s", "expires"),
            ("expires=9999999d", "expires"),  # past year 9999: no page could show it
            ("expires=367d", "expires"),  # more than a year
            ("expires=3000-01-01T00:00:00Z", "expires"),
            ("reason=" + "x" * 1001, "reason"),
        ],
    )
    async def test_bad_reasons_and_expiries_are_400_and_change_nothing(self, client, query, field):
        await register(client)
        response = await client.put(f"/eureka/apps/ORDERS/i-1/status?value=DOWN&{query}")
        assert (400, field) == (response.status, (await response.json())["field"])
        assert [] == await overrides(client)


class TestExpiry:
    async def test_an_expired_override_goes_as_a_delete_would(self, client, clock):
        """At its expiry the override is removed (status UNKNOWN, so the next heartbeat makes
        the client register again with its own status) and the history says it expired."""
        await register(client)
        await client.put(
            "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=drain&expires=2m"
        )
        await clock.advance(60)
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status
        assert 1 == len(await overrides(client))
        await clock.advance(61)
        assert [] == await overrides(client)
        doc = await fetch_json(client, "/eureka/apps/ORDERS/i-1")
        assert ("UNKNOWN", "UNKNOWN") == (
            doc["instance"]["status"],
            doc["instance"]["overriddenStatus"],
        )
        assert 404 == (await client.put("/eureka/apps/ORDERS/i-1")).status
        await register(client)
        doc = await fetch_json(client, "/eureka/apps/ORDERS/i-1")
        assert "UP" == doc["instance"]["status"]
        assert [
            ("set", "i-1", "OUT_OF_SERVICE", "drain"),
            ("expired", "i-1", None, None),
        ] == await history(client)

    async def test_an_evicted_instances_override_expires_too(self, client, clock):
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&expires=10m")
        await clock.advance(200)  # evicted; the override is kept for its return
        assert 1 == len(await overrides(client))
        await clock.advance(400)
        assert [] == await overrides(client)


class TestHistoryAndRestart:
    async def test_set_and_deleted_are_recorded(self, client):
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=maintenance")
        await client.delete("/eureka/apps/ORDERS/i-1/status?value=UP")
        assert [
            ("set", "i-1", "OUT_OF_SERVICE", "maintenance"),
            ("deleted", "i-1", None, None),
        ] == await history(client)

    async def test_reasons_and_expiries_survive_a_restart(self, aiohttp_client, clock):
        """Two runs on the same data directory (the test's own)."""
        first = await aiohttp_client(create_app(Settings(), clock=clock))
        await register(first)
        await first.put("/eureka/apps/ORDERS/i-1/status?value=DOWN&reason=bad+disk&expires=1d")
        listed = await overrides(first)
        await first.close()
        second = await aiohttp_client(create_app(Settings(), clock=clock))
        assert listed == await overrides(second)

    async def test_the_history_is_read_a_page_at_a_time(self, client):
        await register(client)
        for status in ("DOWN", "OUT_OF_SERVICE", "STARTING"):
            await client.put(f"/eureka/apps/ORDERS/i-1/status?value={status}")
        first = await fetch_json(client, "/eureka/overrides/history?limit=2")
        assert ["DOWN", "OUT_OF_SERVICE"] == [h["status"] for h in first["history"]]
        rest = await fetch_json(client, f"/eureka/overrides/history?after={first['next']}")
        assert (["STARTING"], None) == ([h["status"] for h in rest["history"]], rest["next"])
        for limit in ("0", "10001", "x"):
            response = await client.get(f"/eureka/overrides/history?limit={limit}")
            assert (400, "limit") == (response.status, (await response.json())["field"])

    @pytest.mark.parametrize("settings", [Settings.of(store__enabled=False)])
    async def test_no_history_without_a_store(self, client, settings):
        response = await client.get("/eureka/overrides/history")
        assert (403, "not_served") == (response.status, (await response.json())["error"])


class TestExpiryOfALapsedLease:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(leases__eviction_interval=3600)  # lapsed leases stay in the registry

    async def test_it_expires_for_real_and_stays_gone_after_a_restart(
        self, client, clock, aiohttp_client
    ):
        """The instance stopped renewing but is not evicted yet: the override still goes,
        its status with it, and the store does not bring it back."""
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&expires=2m")
        await clock.advance(121)
        assert [] == await overrides(client)
        doc = await fetch_json(client, "/eureka/apps")
        (instance,) = doc["applications"]["application"][0]["instance"]
        assert ("UNKNOWN", "UNKNOWN") == (instance["status"], instance["overriddenStatus"])
        await client.close()
        again = await aiohttp_client(
            create_app(Settings.of(leases__eviction_interval=3600), clock=clock)
        )
        assert [] == await overrides(again)
