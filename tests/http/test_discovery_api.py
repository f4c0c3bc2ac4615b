"""Reads: full registry, delta, one app, one instance, VIPs, status (contract 3.7-3.14)."""

from __future__ import annotations

import asyncio
import gzip

import pytest
from defusedxml.ElementTree import fromstring

from registry import Settings
from registry.appkeys import FEED
from tests.helpers import JSON, fetch_json, register


async def settle() -> None:
    """Let the loop run what is ready (a request reach its handler) without moving time."""
    for _ in range(10):
        await asyncio.sleep(0)


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
        return Settings.of(leases__eviction_interval=3600)

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
        return Settings.of(reads__disable_delta=True)

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

    async def test_an_id_several_applications_hold_has_no_one_answer(self, client):
        """Ids are unique within an application only. The first found would be whichever
        application came first: an instance registered under another application's id would
        answer for it. 409 naming both; each is still found with its application."""
        await register(client, "PAYMENTS", "p-1")
        await register(client, "ORDERS", "p-1", ipAddr="10.6.6.6")
        response = await client.get("/eureka/instances/p-1")
        assert (409, "ambiguous_instance") == (response.status, (await response.json())["error"])
        assert "ORDERS, PAYMENTS" in (await response.json())["detail"]
        doc = await fetch_json(client, "/eureka/apps/PAYMENTS/p-1")
        assert "10.0.0.5" == doc["instance"]["ipAddr"]
        await client.delete("/eureka/apps/ORDERS/p-1")
        assert "PAYMENTS" == (await fetch_json(client, "/eureka/instances/p-1"))["instance"]["app"]


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

    async def test_status_explains_self_preservation(self, client, clock):
        """Self-preservation's inputs and verdict, in JSON and in XML: a client renewing every
        30 s for two minutes weighs 2 renewals a minute."""
        await register(client)
        for _ in range(4):
            assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status
            await clock.advance(30)
        doc = (await fetch_json(client, "/eureka/status"))["selfPreservation"]
        assert {
            "enabled": True,
            "evicting": True,
            "registry-size": 1,
            "min-instances": 10,
            "expected-clients": 1,
            "expected-renews-per-minute": 2.0,
            "departed-clients": 0,
            "renews-threshold": 1,
            "renews-last-minute": 2,
            "expired": 0,
            "expired-held": 0,
        }.items() <= doc.items()
        assert doc["reason"].startswith("1 instance registered, fewer than the 10")
        root = fromstring(await (await client.get("/eureka/status")).read())
        assert "1" == root.findtext("selfPreservation/renews-threshold")
        assert "true" == root.findtext("selfPreservation/evicting")


SINCE = "X-Registry-Since"


class TestSinceHeader:
    async def test_an_index_delta_says_the_index_it_goes_on_from(self, client):
        """apps/delta?index=N answers X-Registry-Since: N, with or without a wait."""
        for n in range(3):
            await register(client, iid=f"i-{n}")
        answers = [
            await client.get("/eureka/apps/delta?index=1", headers=JSON),
            await client.get("/eureka/apps/delta?index=2&wait=30s", headers=JSON),
            await client.get("/eureka/apps/delta?index=1", headers=JSON),  # from the cache
        ]
        assert [(200, "1"), (200, "2"), (200, "1")] == [
            (r.status, r.headers.get(SINCE)) for r in answers
        ]

    async def test_the_plain_delta_has_no_since_header(self, client):
        """The ordinary delta is the whole window, not changes after an index."""
        await register(client)
        response = await client.get("/eureka/apps/delta", headers=JSON)
        assert (200, None) == (response.status, response.headers.get(SINCE))

    async def test_a_held_long_poll_says_the_index_it_waited_from(self, client):
        """A long-poll answered by a later change still names the index it was asked from."""
        await register(client)
        poll = asyncio.ensure_future(client.get("/eureka/apps/delta?index=1&wait=30s"))
        await settle()
        assert not poll.done()
        await register(client, iid="i-2")
        response = await asyncio.wait_for(poll, 5)
        assert ("1", "2") == (response.headers.get(SINCE), response.headers["X-Registry-Index"])

    async def test_a_long_poll_answered_empty_at_the_timeout_says_its_index(self, client, clock):
        """A wait that runs out with no change still names the index it was asked from."""
        await register(client)
        poll = asyncio.ensure_future(client.get("/eureka/apps/delta?index=1&wait=30s"))
        await settle()
        await clock.advance(30)
        response = await asyncio.wait_for(poll, 5)
        assert (200, "1") == (response.status, response.headers.get(SINCE))

    async def test_wait_alone_says_the_index_it_started_at(self, client):
        """Without index the poll goes on from the registry's index when it was asked."""
        await register(client)
        await register(client, iid="i-2")
        poll = asyncio.ensure_future(client.get("/eureka/apps/delta?wait=30s"))
        await settle()
        await register(client, iid="i-3")
        response = await asyncio.wait_for(poll, 5)
        assert "2" == response.headers.get(SINCE)

    @pytest.mark.parametrize(
        "headers",
        [{"Accept": "application/xml"}, {"Accept-Encoding": "gzip", **JSON}],
        ids=["xml", "gzip"],
    )
    async def test_every_format_carries_it(self, client, headers):
        """XML and gzip answers carry the header as JSON ones do."""
        await register(client)
        await register(client, iid="i-2")
        response = await client.get("/eureka/apps/delta?index=1", headers=headers)
        assert (200, "1") == (response.status, response.headers.get(SINCE))


class TestLongPollTurnedOff:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(reads__long_poll=False)

    async def test_index_and_wait_are_ignored_and_the_plain_delta_comes_at_once(self, client):
        """Asked for the changes after the current index with a wait, it answers every recent
        change now, as the plain delta does, and without X-Registry-Since."""
        await register(client, iid="a")
        await register(client, iid="b")
        plain = await client.get("/eureka/apps/delta", headers=JSON)
        response = await asyncio.wait_for(
            client.get("/eureka/apps/delta?index=2&wait=30s", headers=JSON), 5
        )
        doc = (await response.json())["applications"]
        assert (200, None) == (response.status, response.headers.get(SINCE))
        assert ["a", "b"] == [i["instanceId"] for i in doc["application"][0]["instance"]]
        assert await plain.json() == await response.json()
        assert 0 == client.app[FEED].polls

    async def test_wait_alone_does_not_hold_the_request(self, client):
        """A wait with no index is not held either: the plain delta comes at once."""
        await register(client)
        response = await asyncio.wait_for(
            client.get("/eureka/apps/delta?wait=30s", headers=JSON), 5
        )
        doc = (await response.json())["applications"]
        assert (None, ["i-1"]) == (
            response.headers.get(SINCE),
            [i["instanceId"] for i in doc["application"][0]["instance"]],
        )

    @pytest.mark.parametrize(
        "query", ["index=99", "index=0&epoch=0badc0de", "index=0"], ids=["ahead", "foreign", "0"]
    )
    async def test_an_index_it_cannot_go_on_from_is_not_a_410(self, client, clock, query):
        """An index ahead, of another epoch or forgotten means nothing here: the plain delta."""
        await register(client)
        await clock.advance(200)  # past the retention: index 0's changes are forgotten
        await register(client, iid="i-2")
        plain = await fetch_json(client, "/eureka/apps/delta")
        response = await client.get(f"/eureka/apps/delta?{query}", headers=JSON)
        assert (200, None) == (response.status, response.headers.get(SINCE))
        assert plain == await response.json()

    @pytest.mark.parametrize("query", ["index=abc", "wait=forever", "wait=1h"])
    async def test_unreadable_long_poll_parameters_are_ignored_too(self, client, query):
        """A stock Eureka server does not read these parameters, so it cannot refuse them."""
        response = await client.get(f"/eureka/apps/delta?{query}", headers=JSON)
        assert 200 == response.status, await response.text()


class TestPeerReads:
    """A peer copying leases (start-up sync, anti-entropy) reads their renewals as they are
    now; clients read cached documents, whose renewals are as of the last change (bounded by
    response_cache_max_age)."""

    @pytest.mark.parametrize("path", ["/eureka/apps", "/eureka/apps/ORDERS"])
    async def test_a_peer_sees_the_last_renewal(self, client, clock, path):
        await register(client)
        registered = clock.wall_ms()

        async def renewal(headers: dict[str, str]) -> int:
            response = await client.get(path, headers=JSON | headers)
            doc = await response.json()
            apps = (
                doc["applications"]["application"]
                if "applications" in doc
                else [doc["application"]]
            )
            return int(apps[0]["instance"][0]["leaseInfo"]["lastRenewalTimestamp"])

        assert registered == await renewal({})  # cached from here on
        await clock.advance(10)
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status
        assert registered == await renewal({})
        peer = {"x-netflix-discovery-replication": "true"}
        assert registered + 10_000 == await renewal(peer)
