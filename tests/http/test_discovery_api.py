"""Reads: full registry, delta, one app, one instance, VIPs, status (contract 3.7-3.14)."""

from __future__ import annotations

import gzip

import pytest
from defusedxml.ElementTree import fromstring

from registry import Settings
from tests.helpers import JSON, fetch_json, register


class TestFullRegistry:
    async def test_empty_registry_still_lists_applications(self, client):
        """An empty registry has an empty application list, version 1 and an empty hash."""
        doc = await fetch_json(client, "/eureka/apps")
        assert {"versions__delta": "1", "apps__hashcode": "", "application": []} == doc[
            "applications"
        ]

    async def test_no_accept_header_means_xml(self, client):
        """Without Accept (and with */*) the registry comes as XML."""
        await register(client)
        for headers in ({}, {"Accept": "*/*"}, {"Accept": "application/xml"}):
            response = await client.get(
                "/eureka/apps", headers=headers, skip_auto_headers=["Accept"]
            )
            assert "application/xml" == response.content_type
            root = fromstring(await response.read())
            assert ("applications", "UP_1_") == (root.tag, root.findtext("apps__hashcode"))

    async def test_any_accept_mentioning_json_gets_json(self, client):
        """Accept values containing 'json' anywhere choose JSON."""
        response = await client.get("/eureka/apps", headers={"Accept": "text/html, x-json;q=0.1"})
        assert "application/json" == response.content_type

    async def test_gzip_when_asked(self, client):
        """Accept-Encoding: gzip gets gzip bytes with the right Content-Encoding."""
        await register(client)
        response = await client.get(
            "/eureka/apps", headers={"Accept-Encoding": "gzip", **JSON}, auto_decompress=False
        )
        assert "gzip" == response.headers["Content-Encoding"]
        assert b'"apps__hashcode":"UP_1_"' in gzip.decompress(await response.read())

    async def test_plain_without_accept_encoding(self, client):
        """Without Accept-Encoding the body is not compressed."""
        response = await client.get("/eureka/apps", skip_auto_headers=["Accept-Encoding"])
        assert "Content-Encoding" not in response.headers


class TestExpiredNotEvicted:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings(eviction_interval=3600)

    async def test_expired_lease_stays_in_fetches_until_evicted(self, client, clock):
        """Full fetches list an expired, not yet evicted lease; instance GETs hide it."""
        await register(client, leaseInfo={"durationInSecs": 10})
        await clock.advance(11)
        doc = await fetch_json(client, "/eureka/apps")
        assert 1 == len(doc["applications"]["application"])
        assert 404 == (await client.get("/eureka/apps/ORDERS/i-1")).status
        assert 404 == (await client.get("/eureka/instances/i-1")).status


class TestDelta:
    async def test_delta_lists_recent_changes_with_the_whole_registry_hash(self, client):
        """Each changed instance appears once, with its latest action; the hash covers all."""
        await register(client, iid="a")
        await register(client, iid="b")
        await client.put("/eureka/apps/ORDERS/a/status?value=DOWN")
        await client.delete("/eureka/apps/ORDERS/b")
        doc = (await fetch_json(client, "/eureka/apps/delta"))["applications"]
        actions = {i["instanceId"]: i["actionType"] for i in doc["application"][0]["instance"]}
        assert {"a": "MODIFIED", "b": "DELETED"} == actions
        assert ("DOWN_1_", "4") == (doc["apps__hashcode"], doc["versions__delta"])

    async def test_deleted_instance_carries_its_eviction_time(self, client, clock):
        """A cancelled instance's last snapshot has a non-zero evictionTimestamp."""
        await register(client)
        await clock.advance(1)
        await client.delete("/eureka/apps/ORDERS/i-1")
        doc = (await fetch_json(client, "/eureka/apps/delta"))["applications"]
        lease_info = doc["application"][0]["instance"][0]["leaseInfo"]
        assert clock.wall_ms() == lease_info["evictionTimestamp"]

    async def test_changes_leave_the_delta_after_the_retention(self, client, clock):
        """A change stays in the delta for three minutes, then leaves it."""
        await register(client)

        async def keep_alive_for(seconds: int) -> None:
            for _ in range(seconds // 10):
                await clock.advance(10)
                assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status

        await keep_alive_for(170)
        assert 1 == len(
            (await fetch_json(client, "/eureka/apps/delta"))["applications"]["application"]
        )
        await keep_alive_for(20)
        doc = (await fetch_json(client, "/eureka/apps/delta"))["applications"]
        assert ([], "UP_1_") == (doc["application"], doc["apps__hashcode"])

    async def test_xml_delta(self, client):
        """The delta speaks XML too, with actionType on each instance."""
        await register(client)
        root = fromstring(await (await client.get("/eureka/apps/delta")).read())
        assert "ADDED" == root.find("application/instance/actionType").text


class TestDeltaDisabled:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings(disable_delta=True)

    async def test_disabled_delta_is_403(self, client):
        """With deltas off clients get 403 and fall back to full fetches."""
        response = await client.get("/eureka/apps/delta")
        assert (403, "not_served") == (response.status, (await response.json())["error"])


class TestApplicationAndInstance:
    async def test_application(self, client):
        """apps/{app} lists that application's instances only."""
        await register(client, iid="a")
        await register(client, "PAYMENTS", "p")
        doc = await fetch_json(client, "/eureka/apps/orders")
        assert ["a"] == [i["instanceId"] for i in doc["application"]["instance"]]

    async def test_unknown_application_is_404(self, client):
        """An application with no instances is 404."""
        response = await client.get("/eureka/apps/NOPE")
        assert (404, "unknown_application") == (response.status, (await response.json())["error"])

    async def test_instance_by_id_in_any_application(self, client):
        """instances/{id} finds the instance without its app name."""
        await register(client, "PAYMENTS", "p-1")
        doc = await fetch_json(client, "/eureka/instances/p-1")
        assert "PAYMENTS" == doc["instance"]["app"]
        assert 404 == (await client.get("/eureka/instances/zzz")).status


class TestVips:
    async def test_vip_matches_one_name_of_a_comma_list_exactly(self, client):
        """vips/{vip} matches any exact, case-sensitive element of vipAddress."""
        await register(client, iid="a", vipAddress="orders,orders-v2")
        await register(client, iid="b", vipAddress="Orders-v2")
        doc = (await fetch_json(client, "/eureka/vips/orders-v2"))["applications"]
        assert ["a"] == [i["instanceId"] for i in doc["application"][0]["instance"]]
        assert ("-1", "UP_1_") == (doc["versions__delta"], doc["apps__hashcode"])

    async def test_svip_uses_the_secure_address(self, client):
        """svips/{svip} reads secureVipAddress."""
        await register(client, iid="a", secureVipAddress="orders-tls")
        doc = (await fetch_json(client, "/eureka/svips/orders-tls"))["applications"]
        assert 1 == len(doc["application"])

    async def test_unknown_vip_is_an_empty_200(self, client):
        """An unknown VIP is an empty list, not a 404."""
        doc = (await fetch_json(client, "/eureka/vips/nothing"))["applications"]
        assert [] == doc["application"]


class TestServerStatus:
    async def test_status_reports_general_stats(self, client):
        """GET status answers dashboard statistics."""
        await register(client)
        doc = await fetch_json(client, "/eureka/status")
        assert "1" == doc["generalStats"]["registry-size"]
        assert "00:00" == doc["generalStats"]["server-uptime"]
        root = fromstring(await (await client.get("/eureka/status")).read())
        assert "1" == root.findtext("generalStats/registry-size")

    async def test_status_explains_self_preservation(self, client):
        """Self-preservation's inputs and verdict, in JSON and in XML."""
        await register(client)
        doc = (await fetch_json(client, "/eureka/status"))["selfPreservation"]
        assert {
            "enabled": True,
            "evicting": True,
            "registry-size": 1,
            "min-instances": 10,
            "expected-clients": 2,
            "expected-renews-per-minute": 4.0,
            "renews-threshold": 3,
            "renews-last-minute": None,
        }.items() <= doc.items()
        assert doc["reason"].startswith("1 instance registered, fewer than the 10")
        root = fromstring(await (await client.get("/eureka/status")).read())
        assert "3" == root.findtext("selfPreservation/renews-threshold")
        assert "true" == root.findtext("selfPreservation/evicting")
