"""GET apps/{app}/{id}/status/explain: which rule decided an instance's status, and why."""

from __future__ import annotations

from tests.helpers import fetch_json, register

EXPLAIN = "/eureka/apps/ORDERS/i-1/status/explain"


async def explained(client) -> dict:
    return await fetch_json(client, EXPLAIN)


class TestExplain:
    async def test_a_plain_registration_is_always_match(self, client):
        await register(client)
        doc = await explained(client)
        assert ("UP", "AlwaysMatch") == (doc["status"], doc["decidedBy"])
        assert {"claimed": "UP", "override": None, "existingLease": None, "replication": False} == (
            doc["inputs"]
        )
        assert [
            {"rule": "DownOrStarting", "answer": None},
            {"rule": "OverrideExists", "answer": None},
            {"rule": "LeaseExists", "answer": None},
            {"rule": "AlwaysMatch", "answer": "UP"},
        ] == doc["chain"]

    async def test_a_starting_instance_is_believed(self, client):
        await register(client, status="STARTING")
        doc = await explained(client)
        assert ("STARTING", "DownOrStarting") == (doc["status"], doc["decidedBy"])
        assert [{"rule": "DownOrStarting", "answer": "STARTING"}] == doc["chain"]

    async def test_an_override_set_and_then_applied_by_a_heartbeat(self, client):
        """The admin's call sets it; the next heartbeat runs the chain, OverrideExists answers."""
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=drain")
        doc = await explained(client)
        assert ("an admin's override", {"reason": "drain"}) == (
            doc["decidedBy"],
            {"reason": doc["override"]["reason"]},
        )
        assert [] == doc["chain"]
        assert 200 == (await client.put("/eureka/apps/ORDERS/i-1")).status
        doc = await explained(client)
        assert ("OUT_OF_SERVICE", "OverrideExists") == (doc["status"], doc["decidedBy"])
        assert "OUT_OF_SERVICE" == doc["inputs"]["override"]

    async def test_the_servers_view_of_a_lease_wins_over_a_client(self, client):
        """Out of service by an override that was then removed with value=OUT_OF_SERVICE: the
        client re-registers claiming UP, and the existing lease's status stands."""
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        await client.delete("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        assert "an admin's override deleted" == (await explained(client))["decidedBy"]
        await register(client)
        doc = await explained(client)
        assert ("OUT_OF_SERVICE", "LeaseExists") == (doc["status"], doc["decidedBy"])
        assert "OUT_OF_SERVICE" == doc["inputs"]["existingLease"]

    async def test_an_unknown_instance_is_404(self, client):
        response = await client.get(EXPLAIN)
        assert (404, "unknown_instance") == (response.status, (await response.json())["error"])
