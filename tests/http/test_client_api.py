"""Register, heartbeat and cancel over HTTP: status codes and paths as Eureka clients expect."""

from __future__ import annotations

import gzip

import orjson
import pytest

from registry import Settings, create_app
from tests.credentials import AS_ADMIN, SECURED
from tests.helpers import JSON, fetch_json, instance_doc, register, registry_of

REPLICATION = {"x-netflix-discovery-replication": "true"}


class TestPaths:
    @pytest.mark.parametrize("base", ["/eureka/", "/eureka/v2/", "/eureka/v1/"])
    @pytest.mark.parametrize("slash", ["", "/"])
    async def test_every_prefix_and_trailing_slash(self, client, base, slash):
        """Both API prefixes work, with or without a trailing slash."""
        response = await client.post(
            f"{base}apps/ORDERS{slash}",
            data=orjson.dumps({"instance": instance_doc()}),
            headers={"Content-Type": "application/json"},
        )
        assert 204 == response.status
        assert 200 == (await client.put(f"{base}apps/ORDERS/i-1{slash}")).status
        assert 200 == (await client.get(f"{base}apps{slash}", headers=JSON)).status

    async def test_app_names_are_case_insensitive(self, client):
        """apps/orders and apps/ORDERS are the same application; instance ids are not folded."""
        await register(client, "orders", "i-1")
        assert 200 == (await client.put("/eureka/apps/Orders/i-1")).status
        assert 404 == (await client.put("/eureka/apps/ORDERS/I-1")).status
        assert ["ORDERS"] == [name for name, _ in registry_of(client).applications()]

    async def test_an_application_called_delta_can_register(self, client):
        """apps/delta is the delta for GET, and still a registration path for POST."""
        await register(client, "delta", "d-1")
        assert ["DELTA"] == [name for name, _ in registry_of(client).applications()]

    async def test_ids_with_braces_are_reachable(self, client):
        """Any id a client registers can be renewed, read and cancelled through its path."""
        await register(client, iid="a{b}")
        assert 200 == (await client.put("/eureka/apps/ORDERS/a%7Bb%7D")).status
        assert 200 == (await client.get("/eureka/apps/ORDERS/a%7Bb%7D")).status
        assert 200 == (await client.delete("/eureka/apps/ORDERS/a%7Bb%7D")).status


class TestRegister:
    async def test_register_answers_204_with_no_body(self, client):
        """Java clients count only 204 as a successful registration."""
        response = await client.post(
            "/eureka/apps/ORDERS",
            data=orjson.dumps({"instance": instance_doc()}),
            headers={"Content-Type": "application/json"},
        )
        assert (204, b"") == (response.status, await response.read())

    async def test_gzip_request_body_is_inflated(self, client):
        """A gzip-compressed registration is read like a plain one."""
        response = await client.post(
            "/eureka/apps/ORDERS",
            data=gzip.compress(orjson.dumps({"instance": instance_doc()})),
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        assert 204 == response.status
        assert 1 == len(registry_of(client))

    async def test_latin1_xml_without_declaration(self, client):
        """An XML body declared ISO-8859-1 by its Content-Type is decoded as such."""
        body = (
            "<instance><instanceId>latin-1</instanceId><hostName>h\u00e9</hostName>"
            "<app>LATIN</app><ipAddr>1.1.1.1</ipAddr>"
            "<dataCenterInfo><name>MyOwn</name></dataCenterInfo></instance>"
        ).encode("iso-8859-1")
        response = await client.post(
            "/eureka/apps/LATIN",
            data=body,
            headers={"Content-Type": "application/xml; charset=ISO-8859-1"},
        )
        assert 204 == response.status
        assert (
            "h\u00e9"
            == (await fetch_json(client, "/eureka/instances/latin-1"))["instance"]["hostName"]
        )

    async def test_minimal_body_is_enough(self, client):
        """hostName, app, ipAddr and dataCenterInfo are all a registration needs."""
        body = {
            "instance": {
                "hostName": "h1",
                "app": "MINI",
                "ipAddr": "10.1.1.1",
                "dataCenterInfo": {"name": "MyOwn"},
            }
        }
        response = await client.post("/eureka/apps/MINI", data=orjson.dumps(body))
        assert 204 == response.status
        doc = await fetch_json(client, "/eureka/apps/MINI/h1")
        instance = doc["instance"]
        assert ("h1", "UP", {"$": 7001, "@enabled": "true"}) == (
            instance["instanceId"],
            instance["status"],
            instance["port"],
        )

    async def test_lenient_scalars(self, client):
        """Bare port numbers, boolean @enabled and the lower-case overriddenstatus are accepted."""
        await register(
            client,
            port=8080,
            securePort={"$": "8443", "@enabled": True},
            overriddenStatus=...,
            overriddenstatus="UNKNOWN",
            lastDirtyTimestamp=1735689000000,
        )
        instance = (await fetch_json(client, "/eureka/apps/ORDERS/i-1"))["instance"]
        assert {"$": 8080, "@enabled": "true"} == instance["port"]
        assert {"$": 8443, "@enabled": "true"} == instance["securePort"]
        assert "1735689000000" == instance["lastDirtyTimestamp"]

    async def test_spring_metadata_instance_id(self, client):
        """Without instanceId, Spring's metadata.instanceId gives host:id."""
        await register(client, iid="ignored", instanceId=..., metadata={"instanceId": "orders:1"})
        instance = registry_of(client).find("ignored.example.internal:orders:1", now_ms=0).instance
        assert "ORDERS" == instance.app

    async def test_amazon_instance_id_is_filled_in(self, client):
        """An Amazon data center without instance-id gets the instance's id, as Eureka does."""
        await register(
            client,
            dataCenterInfo={
                "@class": "com.netflix.appinfo.AmazonInfo",
                "name": "Amazon",
                "metadata": {"availability-zone": "us-east-1a"},
            },
        )
        instance = (await fetch_json(client, "/eureka/apps/ORDERS/i-1"))["instance"]
        assert {"availability-zone": "us-east-1a", "instance-id": "i-1"} == (
            instance["dataCenterInfo"]["metadata"]
        )


class TestHeartbeat:
    async def test_heartbeat_is_200_and_unknown_is_404(self, client):
        """A known instance renews with 200; an unknown one gets 404 so it re-registers."""
        await register(client)
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1?status=UP")).status
        assert 404 == (await client.put("/eureka/apps/ORDERS/i-2")).status

    async def test_status_parameter_is_ignored(self, client):
        """The client's ?status= does not change what the registry holds."""
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1?status=DOWN")
        assert "UP_1_" == registry_of(client).reconcile_hash()

    async def test_newer_client_data_gets_404(self, client):
        """A client whose lastDirtyTimestamp is newer than ours is asked to re-register."""
        await register(client, lastDirtyTimestamp="1000")
        assert 404 == (await client.put("/eureka/apps/ORDERS/i-1?lastDirtyTimestamp=2000")).status
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1?lastDirtyTimestamp=1000")).status
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1?lastDirtyTimestamp=500")).status

    async def test_two_signs_are_a_400_that_renews_nothing(self, client, clock):
        """lastDirtyTimestamp "-+5" is refused naming it, and the lease is not renewed."""
        await register(client)
        [lease] = registry_of(client).leases()
        renewed_ms = lease.last_renewal_ms
        await clock.advance(10)
        response = await client.put("/eureka/apps/ORDERS/i-1?lastDirtyTimestamp=-%2B5")
        assert (400, "lastDirtyTimestamp") == (response.status, (await response.json())["field"])
        assert renewed_ms == lease.last_renewal_ms
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status
        assert renewed_ms + 10_000 == lease.last_renewal_ms  # the control: a heartbeat renews

    async def test_stale_peer_gets_409_with_our_instance(self, client):
        """A peer with older data gets 409 and our copy, in the format it accepts."""
        await register(client, lastDirtyTimestamp="1000")
        response = await client.put(
            "/eureka/apps/ORDERS/i-1?lastDirtyTimestamp=500",
            headers={**REPLICATION, **JSON},
        )
        assert 409 == response.status
        assert "1000" == (await response.json())["instance"]["lastDirtyTimestamp"]

    async def test_newer_peer_hands_over_its_override(self, client):
        """A replicated heartbeat with newer data stores the peer's override and answers 404."""
        await register(client, lastDirtyTimestamp="1000")
        response = await client.put(
            "/eureka/apps/ORDERS/i-1?lastDirtyTimestamp=2000&overriddenstatus=OUT_OF_SERVICE",
            headers=REPLICATION,
        )
        assert 404 == response.status
        assert {"i-1": "OUT_OF_SERVICE"} == dict(registry_of(client).overrides)


class TestRegistrationsDatedAhead:
    """A registration's lastDirtyTimestamp decides which of two registrations of an id wins,
    on every node once replicated. One dated ahead of the node's clock is taken at most
    `client_clock_skew` (5 s) ahead: no credential can pin an id against its owner's later
    registrations for the minutes `max_clock_skew` allows."""

    @staticmethod
    def ahead(clock, seconds: float) -> str:
        return str(clock.wall_ms() + int(seconds * 1000))

    async def test_a_registration_dated_minutes_ahead_does_not_outrank_a_later_one(
        self, client, clock
    ):
        pinned = await client.post(
            "/eureka/apps/ORDERS",
            data=orjson.dumps(
                {
                    "instance": instance_doc(
                        ipAddr="10.6.6.6", lastDirtyTimestamp=self.ahead(clock, 290)
                    )
                }
            ),
            headers={"Content-Type": "application/json"},
        )
        assert pinned.headers["X-Registry-Registration"].startswith("dated ahead")
        held = registry_of(client).get("ORDERS", "i-1", now_ms=clock.wall_ms()).instance
        assert clock.wall_ms() + 5_000 == held.last_dirty_ms
        await clock.advance(6)
        await register(client, lastDirtyTimestamp=self.ahead(clock, 0))  # the owner, later
        assert (
            "10.0.0.5"
            == (await fetch_json(client, "/eureka/apps/ORDERS/i-1"))["instance"]["ipAddr"]
        )

    async def test_a_client_running_ahead_registers_again_until_the_clocks_agree(
        self, client, clock
    ):
        """Its client keeps its own timestamp: while ours is behind it, a heartbeat answers
        404 and it registers again, one registration a heartbeat, then renews."""
        stamp = self.ahead(clock, 40)
        await register(client, lastDirtyTimestamp=stamp)
        heartbeat = f"/eureka/apps/ORDERS/i-1?lastDirtyTimestamp={stamp}"
        rounds = 0
        while (await client.put(heartbeat)).status == 404:
            rounds += 1
            await clock.advance(30)
            await register(client, lastDirtyTimestamp=stamp)
        assert 2 == rounds  # taken as +5 s, then at +30 s as +35 s, then at +60 s as it is
        assert (
            int(stamp)
            == registry_of(client)
            .get("ORDERS", "i-1", now_ms=clock.wall_ms())
            .instance.last_dirty_ms
        )

    async def test_within_the_skew_a_timestamp_is_kept_as_it_is(self, client, clock):
        stamp = self.ahead(clock, 4.5)
        response = await client.post(
            "/eureka/apps/ORDERS",
            data=orjson.dumps({"instance": instance_doc(lastDirtyTimestamp=stamp)}),
            headers={"Content-Type": "application/json"},
        )
        assert "X-Registry-Registration" not in response.headers
        assert (
            200 == (await client.put(f"/eureka/apps/ORDERS/i-1?lastDirtyTimestamp={stamp}")).status
        )

    async def test_a_peers_copy_keeps_its_timestamp(self, client, clock):
        """A peer's copy was dated where it was registered, and is kept as it came."""
        stamp = self.ahead(clock, 60)
        response = await client.post(
            "/eureka/apps/ORDERS",
            data=orjson.dumps({"instance": instance_doc(lastDirtyTimestamp=stamp)}),
            headers={"Content-Type": "application/json", **REPLICATION},
        )
        assert 204 == response.status
        held = registry_of(client).get("ORDERS", "i-1", now_ms=clock.wall_ms()).instance
        assert int(stamp) == held.last_dirty_ms


class TestCancel:
    async def test_cancel_is_200_then_404(self, client):
        """Cancelling removes the instance; cancelling again finds nothing."""
        await register(client)
        assert 200 == (await client.delete("/eureka/apps/ORDERS/i-1")).status
        assert 404 == (await client.delete("/eureka/apps/ORDERS/i-1")).status
        assert 0 == len(registry_of(client))


class TestLoopbackNames:
    """With no credentials configured, only loopback Host names are answered: a page of
    another site whose name resolves to 127.0.0.1 (DNS rebinding) reaches nothing."""

    @pytest.mark.parametrize(
        "host", ["evil.example", "evil.example:8761", "10.0.0.5:8761", "[::2]:8761"]
    )
    async def test_another_name_is_refused(self, client, host):
        response = await client.get("/eureka/apps", headers={"Host": host})
        detail = (
            "with no credentials configured this node answers loopback names only "
            f"(127.0.0.1, localhost), not {host!r}"
        )
        refused = {"error": "not_loopback", "detail": detail}
        assert (403, refused) == (response.status, await response.json())

    @pytest.mark.parametrize(
        "host",
        ["localhost", "localhost:8761", "127.0.0.1", "[::1]:8761", "[::1]", "::1", "127.0.0.2"],
    )
    async def test_loopback_names_are_answered(self, client, host):
        assert 200 == (await client.get("/eureka/apps", headers={"Host": host})).status

    @pytest.mark.parametrize(
        "settings",
        [Settings.of(server__host="0.0.0.0", server__insecure_public_bind=True), SECURED],
        ids=["insecure_public_bind", "secured"],
    )
    async def test_any_name_is_answered_where_the_node_is_meant_to_be_reached(
        self, aiohttp_client, settings, clock
    ):
        """Bound to a public address on purpose, or guarded by credentials: a client may
        reach the node by any name."""
        client = await aiohttp_client(create_app(settings, clock=clock))
        response = await client.get(
            "/eureka/apps", headers={"Host": "registry.example", **AS_ADMIN}
        )
        assert 200 == response.status, await response.text()
