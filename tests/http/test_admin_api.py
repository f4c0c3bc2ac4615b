"""Admin overrides and metadata over HTTP (contract 3.4-3.6, 3.16)."""

from __future__ import annotations

import pytest

from tests.helpers import JSON, fetch_json, register, registry_of


async def instance_json(client, iid: str = "i-1") -> dict:
    return (await fetch_json(client, f"/eureka/apps/ORDERS/{iid}"))["instance"]


class TestStatusOverride:
    async def test_put_sets_both_status_fields(self, client):
        """PUT status?value=OUT_OF_SERVICE takes the instance out of traffic."""
        await register(client)
        response = await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        assert 200 == response.status
        instance = await instance_json(client)
        assert ("OUT_OF_SERVICE", "OUT_OF_SERVICE", "MODIFIED") == (
            instance["status"],
            instance["overriddenStatus"],
            instance["actionType"],
        )

    @pytest.mark.parametrize("value", ["UNKNOWN", "unknown", "OUT_OF_SERVIC"])
    async def test_unknown_is_no_override(self, client, value):
        """UNKNOWN (or a name Eureka does not know, which reads as UNKNOWN) would answer the
        instance's every heartbeat 404, and peers refuse it: a 400, and nothing changes."""
        await register(client)
        response = await client.put(f"/eureka/apps/ORDERS/i-1/status?value={value}")
        assert 400 == response.status
        assert "value" == (await response.json())["field"]
        assert ("UP", "UNKNOWN") == (
            (await instance_json(client))["status"],
            (await instance_json(client))["overriddenStatus"],
        )
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status

    async def test_a_peers_unknown_leaves_no_override(self, client):
        """A stock peer replicating call by call sends the status of its record, UNKNOWN
        after an admin's bare DELETE: taken as that deletion. Only the exact name: a peer's
        misspelt status is still refused."""
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        peer = {"x-netflix-discovery-replication": "true"}
        misspelt = "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVIC"
        assert 400 == (await client.put(misspelt, headers=peer)).status
        assert {"i-1": "OUT_OF_SERVICE"} == dict(registry_of(client).overrides)
        unknown = "/eureka/apps/ORDERS/i-1/status?value=UNKNOWN"
        assert 200 == (await client.put(unknown, headers=peer)).status
        assert {} == dict(registry_of(client).overrides)
        assert "UNKNOWN" == (await instance_json(client))["status"]
        assert 404 == (await client.put("/eureka/apps/ORDERS/i-1")).status

    async def test_a_reason_that_is_not_utf8_is_refused(self, client):
        """`%FF` would have been kept as U+FFFD; metadata refuses it, and so does a reason."""
        await register(client)
        response = await client.put("/eureka/apps/ORDERS/i-1/status?value=DOWN&reason=disk%FF")
        assert 400 == response.status
        assert "reason" == (await response.json())["field"]
        assert "UNKNOWN" == (await instance_json(client))["overriddenStatus"]

    async def test_override_survives_heartbeats_and_re_registration(self, client):
        """The client's own UP does not undo the admin's decision."""
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1?status=UP")).status
        await register(client, lastDirtyTimestamp="1735689060000")
        assert "OUT_OF_SERVICE" == (await instance_json(client))["status"]

    async def test_put_on_unknown_instance_is_404(self, client):
        """Overriding an instance that is not registered finds nothing."""
        response = await client.put("/eureka/apps/ORDERS/ghost/status?value=DOWN")
        assert 404 == response.status
        assert "unknown_instance" == (await response.json())["error"]

    async def test_delete_without_value_forces_a_re_registration(self, client):
        """DELETE status leaves UNKNOWN; the next heartbeat is 404; re-registering restores UP."""
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        assert 200 == (await client.delete("/eureka/apps/ORDERS/i-1/status")).status
        assert ("UNKNOWN", "UNKNOWN") == (
            (await instance_json(client))["status"],
            (await instance_json(client))["overriddenStatus"],
        )
        assert 404 == (await client.put("/eureka/apps/ORDERS/i-1")).status
        await register(client, lastDirtyTimestamp="1735689060000")
        assert "UP" == (await instance_json(client))["status"]

    async def test_delete_with_value_sets_it(self, client):
        """DELETE status?value=UP puts the instance straight back in traffic."""
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        assert 200 == (await client.delete("/eureka/apps/ORDERS/i-1/status?value=UP")).status
        assert "UP" == (await instance_json(client))["status"]
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status

    async def test_overrides_are_listed(self, client):
        """serverinfo/statusoverrides lists every override in force."""
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=down")
        response = await client.get("/eureka/serverinfo/statusoverrides")
        assert {"i-1": "DOWN"} == await response.json()


class TestMetadata:
    async def test_metadata_put_merges_and_shows_as_added(self, client):
        """Query parameters become metadata; the instance is re-registered (ADDED)."""
        await register(client)
        response = await client.put("/eureka/apps/ORDERS/i-1/metadata?zone=z1&management.port=9")
        assert 200 == response.status
        instance = await instance_json(client)
        assert {"management.port": "9", "zone": "z1"} == instance["metadata"]
        assert "ADDED" == instance["actionType"]

    async def test_first_value_of_a_repeated_key_wins(self, client):
        """Like Eureka, only the first value of a repeated parameter is taken."""
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/metadata?k=first&k=second")
        assert "first" == (await instance_json(client))["metadata"]["k"]

    async def test_metadata_merged_past_its_bounds_is_refused(self, client):
        await register(client)
        before = (await instance_json(client))["metadata"]
        query = "&".join(f"k{n}=v" for n in range(256))  # 257 with what it holds
        response = await client.put(f"/eureka/apps/ORDERS/i-1/metadata?{query}")
        assert (400, "metadata") == (response.status, (await response.json())["field"])
        assert before == (await instance_json(client))["metadata"]

    async def test_metadata_on_unknown_instance_is_404(self, client):
        """Metadata for an unregistered instance finds nothing and creates nothing."""
        assert 404 == (await client.put("/eureka/apps/ORDERS/ghost/metadata?a=1")).status
        assert 0 == len(registry_of(client))

    async def test_awkward_metadata_keys_survive_xml(self, client):
        """Keys no XML name can hold round-trip through the XML encoding."""
        await register(client, metadata={"app.kubernetes.io/name": "orders", "my_key$": "v"})
        xml = await (await client.get("/eureka/apps/ORDERS/i-1")).text()
        assert "<app.kubernetes.io_x2f_name>orders</app.kubernetes.io_x2f_name>" in xml
        assert "<my__key_->v</my__key_->" in xml
        response = await client.get("/eureka/apps/ORDERS/i-1", headers=JSON)
        assert "orders" == (await response.json())["instance"]["metadata"]["app.kubernetes.io/name"]
