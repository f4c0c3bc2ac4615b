"""POST peerreplication/batch: each item answered on its own (contract 11.4)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from registry import FakeClock
from registry.core.model import InstanceStatus
from registry.http import peer_api
from tests.helpers import fetch_json, instance_doc, register, registry_of

BATCH = "/eureka/peerreplication/batch/"
JSON_BODY = {"Content-Type": "application/json", "Accept": "application/json"}
OURS = {**JSON_BODY, "X-Registry-Peer": "1"}  # as our nodes send a batch


async def post_batch(
    client: TestClient, items: list[Any], headers: dict[str, str] = OURS
) -> list[dict[str, Any]]:
    response = await client.post(
        BATCH, data=orjson.dumps({"replicationList": items}), headers=headers
    )
    assert 200 == response.status, await response.text()
    answers: list[dict[str, Any]] = (await response.json())["responseList"]
    return answers


def item(action: str, iid: str = "i-1", **fields: Any) -> dict[str, Any]:
    return {"appName": "ORDERS", "id": iid, **fields, "action": action}


class TestItems:
    async def test_an_overrides_note_is_taken_and_a_malformed_one_refused(self, client):
        """Our fields beside a StatusUpdate carry the override's note; one that does not read
        refuses the item before anything is applied."""
        await register(client)
        note = {"overrideReason": "incident", "overrideSetBy": "ops", "overrideSetAt": 5}
        bad = {**note, "overrideExpiresAt": "tomorrow"}
        answers = await post_batch(
            client,
            [
                item("StatusUpdate", status="DOWN", **bad),
                item("StatusUpdate", status="OUT_OF_SERVICE", overrideExpiresAt=9, **note),
            ],
        )
        assert [400, 200] == [a["statusCode"] for a in answers]
        assert "overrideExpiresAt" in answers[0]["detail"]
        [listed] = (await fetch_json(client, "/eureka/overrides"))["overrides"]
        assert ("OUT_OF_SERVICE", "incident", "ops", 5, 9) == (
            listed["status"],
            listed["reason"],
            listed["setBy"],
            listed["setAt"],
            listed["expiresAt"],
        )

    async def test_every_action_applies(self, client: TestClient):
        """Register, heartbeat, override set and delete, and cancel, in one batch."""
        doc = instance_doc(iid="i-1", lastDirtyTimestamp=1735689000000)
        answers = await post_batch(
            client,
            [
                item("Register", lastDirtyTimestamp=1735689000000, status="UP", instanceInfo=doc),
                item("Heartbeat", lastDirtyTimestamp=1735689000000, status="UP"),
                item("StatusUpdate", lastDirtyTimestamp=1735689000000, status="OUT_OF_SERVICE"),
            ],
        )
        assert [200, 200, 200] == [a["statusCode"] for a in answers]
        instance = (await fetch_json(client, "/eureka/apps/ORDERS/i-1"))["instance"]
        assert ("OUT_OF_SERVICE", "OUT_OF_SERVICE") == (
            instance["status"],
            instance["overriddenStatus"],
        )
        answers = await post_batch(
            client,
            [
                item("DeleteStatusOverride", lastDirtyTimestamp=1735689000000, status="UP"),
                item("Cancel"),
                item("Cancel"),
            ],
        )
        assert [200, 200, 404] == [a["statusCode"] for a in answers]
        assert 0 == len(registry_of(client))

    @pytest.mark.parametrize(
        ("fields", "field"),
        [
            ({"overrideSetAt": 2**63 - 1}, "overrideSetAt"),  # wins every later comparison
            ({"overrideExpiresAt": 2**63 - 1}, "overrideExpiresAt"),
            ({"overrideExpiresAt": 4}, "overrideExpiresAt"),  # before it was set
            ({"overrideReason": "r" * 4096}, "overrideReason"),
            ({"overrideSetBy": "o" * 300}, "overrideSetBy"),
        ],
        ids=["set-ahead", "expiry-never", "expiry-before-set", "long-reason", "long-author"],
    )
    async def test_a_peers_note_is_checked_as_an_admins_call_is(self, client, fields, field):
        await register(client)
        note = {"overrideReason": "incident", "overrideSetBy": "ops", "overrideSetAt": 5}
        [answer] = await post_batch(
            client, [item("StatusUpdate", status="OUT_OF_SERVICE", **(note | fields))]
        )
        assert 400 == answer["statusCode"]
        assert field in answer["detail"]
        assert [] == (await fetch_json(client, "/eureka/overrides"))["overrides"]

    async def test_a_stale_heartbeat_gets_our_newer_copy(self, client: TestClient):
        """A peer's heartbeat with an older lastDirtyTimestamp is answered 409 with ours."""
        await register(client, lastDirtyTimestamp="1735689005000")
        [answer] = await post_batch(client, [item("Heartbeat", lastDirtyTimestamp=1735689000000)])
        assert 409 == answer["statusCode"]
        assert ("i-1", "1735689005000") == (
            answer["responseEntity"]["instanceId"],
            answer["responseEntity"]["lastDirtyTimestamp"],
        )

    async def test_the_copies_an_answer_carries_are_bounded(self, client: TestClient):
        """Heartbeats for a fat instance, each stale: the first 409s carry our copy, and once
        the copies would pass four times the request's size, the rest go without (a 900 KB
        batch drew a 45 MB answer)."""
        metadata = {f"k{n}": "v" * 200 for n in range(200)}  # a copy of about 45 KB
        await register(client, lastDirtyTimestamp="1735689005000", metadata=metadata)
        items = [item("Heartbeat", lastDirtyTimestamp=1735689000000)] * 200
        body = orjson.dumps({"replicationList": items})
        response = await client.post(BATCH, data=body, headers=JSON_BODY)
        answer = await response.read()
        answers = orjson.loads(answer)["responseList"]
        assert [409] * 200 == [a["statusCode"] for a in answers]
        copies = sum("responseEntity" in a for a in answers)
        assert 0 < copies < 200
        assert "responseEntity" in answers[0] and "responseEntity" not in answers[-1]
        assert len(answer) <= max(peer_api.COPY_BYTES_FLOOR, 4 * len(body)) + 64 * 1024

    async def test_a_batch_of_more_than_a_thousand_items_is_refused(self, client: TestClient):
        items = [item("Heartbeat", iid=f"i-{n}") for n in range(1_001)]
        response = await client.post(
            BATCH, data=orjson.dumps({"replicationList": items}), headers=OURS
        )
        assert 400 == response.status
        assert "replicationList" == (await response.json())["field"]

    async def test_removals_travel_and_are_listed(self, client: TestClient):
        """A cancel carrying what it removed and when is remembered and listed; a peer's
        registration of the copy it removed is then answered 409 removed_here, saying so."""
        await register(client, lastDirtyTimestamp="1735689000000")
        removal = {"lastDirtyTimestamp": 1735689000000, "removedAt": 1735689001000}
        [cancelled] = await post_batch(client, [item("Cancel", **removal)])
        assert 200 == cancelled["statusCode"]
        listed = await fetch_json(client, "/eureka/peerreplication/removed?app=orders")
        expected = {"appName": "ORDERS", "id": "i-1", **removal, "expired": False}
        assert [expected] == listed["removed"]
        doc = instance_doc(lastDirtyTimestamp="1735689000000")
        doc["leaseInfo"] = {"lastRenewalTimestamp": 1735689000500}
        [refused] = await post_batch(client, [item("Register", instanceInfo=doc)])
        assert {"statusCode": 409, "error": "removed_here", **removal} == {
            key: refused[key] for key in ("statusCode", "error", *removal)
        }

    async def test_an_eviction_is_listed_as_one(self, client: TestClient, clock: FakeClock):
        """An eviction's removal says so: for a peer, evidence its own eviction weighs, where a
        cancel is the client's goodbye."""
        await register(client)
        await clock.advance(100)
        listed = await fetch_json(client, "/eureka/peerreplication/removed")
        assert [("i-1", True)] == [(r["id"], r["expired"]) for r in listed["removed"]]

    async def test_a_stock_eureka_peer_gets_eurekas_answers(self, client: TestClient):
        """A batch without our X-Registry-Peer header comes from a stock Eureka server, which
        fails a whole answer with a field it does not know: each item's answer is Eureka's
        statusCode, with the copy of a 409, and nothing of ours."""
        await register(client, lastDirtyTimestamp="1735689000000")
        removal = {"lastDirtyTimestamp": 1735689000000, "removedAt": 1735689001000}
        doc = instance_doc(iid="gone", lastDirtyTimestamp="1735689000000")
        answers = await post_batch(
            client,
            [
                item("Heartbeat", lastDirtyTimestamp=1),  # older: our copy, 409
                item("Heartbeat", iid="nope"),
                item("Cancel", iid="gone", **removal),
                item("Register", iid="gone", instanceInfo=doc),  # removed here: 409
                item("Explode"),
            ],
            headers=JSON_BODY,
        )
        assert [
            (409, {"statusCode", "responseEntity"}),
            (404, {"statusCode"}),
            (404, {"statusCode"}),
            (409, {"statusCode"}),
            (400, {"statusCode"}),
        ] == [(answer["statusCode"], set(answer)) for answer in answers]
        assert "i-1" == answers[0]["responseEntity"]["instanceId"]

    async def test_an_older_node_of_ours_is_known_by_its_user_agent(self, client: TestClient):
        """Releases before X-Registry-Peer send our User-Agent alone: their answers keep the
        fields of ours (the error's name and detail)."""
        older = {**JSON_BODY, "User-Agent": "service-registry-replication"}
        [answer] = await post_batch(client, [item("Heartbeat", iid="nope")], headers=older)
        assert (404, "unknown_instance") == (answer["statusCode"], answer["error"])

    async def test_a_heartbeat_for_an_unknown_instance_is_404(self, client: TestClient):
        """The sender follows a 404 with the full registration."""
        [answer] = await post_batch(client, [item("Heartbeat", lastDirtyTimestamp=1)])
        assert 404 == answer["statusCode"]

    @pytest.mark.parametrize("headers", [JSON_BODY, OURS], ids=["stock", "ours"])
    async def test_a_status_update_naming_unknown_leaves_no_override(
        self, client: TestClient, headers: dict[str, str]
    ):
        """A stock node builds a StatusUpdate from its record, UNKNOWN after an admin's bare
        DELETE of the override (it was refused: the stock node logged it and dropped the
        task). Applied as that deletion: the override goes, the status is UNKNOWN, and the
        next heartbeat answers 404 so that the client registers again."""
        await register(client)
        update = item("StatusUpdate", lastDirtyTimestamp=1735689000000, status="OUT_OF_SERVICE")
        assert [200] == [a["statusCode"] for a in await post_batch(client, [update], headers)]
        assert {"i-1": "OUT_OF_SERVICE"} == dict(registry_of(client).overrides)
        stock = {"appName": "ORDERS", "id": "i-1", "lastDirtyTimestamp": 1735689000000}
        unknown = {**stock, "status": "UNKNOWN", "action": "StatusUpdate"}
        assert [200] == [a["statusCode"] for a in await post_batch(client, [unknown], headers)]
        assert {} == dict(registry_of(client).overrides)
        doc = await fetch_json(client, "/eureka/apps/ORDERS/i-1")
        assert ("UNKNOWN", "UNKNOWN") == (
            doc["instance"]["status"],
            doc["instance"]["overriddenStatus"],
        )
        assert 404 == (await client.put("/eureka/apps/ORDERS/i-1")).status
        nameless = {**stock, "action": "StatusUpdate"}
        [answer] = await post_batch(client, [nameless], headers)
        assert 400 == answer["statusCode"]  # a stock sender is answered a bare code

    async def test_a_status_update_naming_unknown_without_an_override_leaves_it_unknown(
        self, client: TestClient
    ):
        """A stock node's admin PUT of UNKNOWN on an instance without an override (Eureka holds
        an override of UNKNOWN: the instance shows UNKNOWN there, and its heartbeats answer 404
        until its client registers again) leaves it UNKNOWN here too, not UP."""
        await register(client)
        stock = {"appName": "ORDERS", "id": "i-1", "lastDirtyTimestamp": 1735689000000}
        unknown = {**stock, "status": "UNKNOWN", "action": "StatusUpdate"}
        assert [200] == [a["statusCode"] for a in await post_batch(client, [unknown])]
        assert {} == dict(registry_of(client).overrides)
        doc = await fetch_json(client, "/eureka/apps/ORDERS/i-1")
        assert ("UNKNOWN", "UNKNOWN") == (
            doc["instance"]["status"],
            doc["instance"]["overriddenStatus"],
        )
        assert 404 == (await client.put("/eureka/apps/ORDERS/i-1")).status
        await register(client)
        assert "UP" == (await fetch_json(client, "/eureka/apps/ORDERS/i-1"))["instance"]["status"]

    async def test_bad_items_are_refused_alone(self, client: TestClient):
        """Malformed items get a 400 each, with the reason; the good ones still apply."""
        good = item("Register", instanceInfo=instance_doc(iid="ok"), iid="ok")
        answers = await post_batch(
            client,
            [
                "not an object",
                item("Explode"),
                {"id": "i-1", "action": "Cancel"},
                item("Register"),
                item("Register", instanceInfo=instance_doc(iid="bad", ipAddr=None)),
                item("Heartbeat", lastDirtyTimestamp="yesterday"),
                item("StatusUpdate", status="SIDEWAYS"),
                good,
            ],
        )
        assert [400, 400, 400, 400, 400, 400, 400, 200] == [a["statusCode"] for a in answers]
        assert "appName" in answers[2]["detail"]
        assert ["ok"] == [lease.instance.instance_id for lease in registry_of(client).leases()]

    @pytest.mark.parametrize("action", [["x"], {"Register": 1}, 5, None, True])
    async def test_an_action_that_is_no_name_is_400_without_a_traceback(
        self, client: TestClient, action: object
    ):
        with capture_logs() as logs:
            (answer,) = await post_batch(client, [{**item("Cancel"), "action": action}])
        assert (400, "bad_input") == (answer["statusCode"], answer["error"])
        assert answer["detail"].startswith("action: must be one of")
        assert [] == [e for e in logs if e["log_level"] == "error"]

    async def test_items_are_applied_as_replication(self, client: TestClient):
        """A replicated registration does not count as the instance's own client call."""
        doc = instance_doc(iid="i-1", status="DOWN", overriddenStatus="OUT_OF_SERVICE")
        await post_batch(client, [item("Register", instanceInfo=doc)])
        assert {"i-1": InstanceStatus.OUT_OF_SERVICE} == dict(registry_of(client).overrides)


class TestBody:
    @pytest.mark.parametrize(
        "body",
        [b"not json", b'{"replicationList": {"a": 1}}', b"[1, 2", b'{"other": []}'],
    )
    async def test_a_body_that_is_no_batch_is_400(self, client: TestClient, body: bytes):
        """A request that is not a replication batch at all is refused as a whole."""
        response = await client.post(BATCH, data=body, headers=JSON_BODY)
        assert 400 == response.status
        assert "error" in await response.json()

    async def test_an_empty_batch_is_answered_empty(self, client: TestClient):
        """Nothing to apply, nothing to answer."""
        assert [] == await post_batch(client, [])


class TestLargeBatches:
    async def test_the_loop_gets_turns_while_a_large_batch_is_applied(self, client: TestClient):
        """A peer's registration storm is applied in slices: other work runs in
        between, and every item is still answered, in order."""
        turns = 0
        applying = True

        async def other_work() -> None:
            nonlocal turns
            while applying:
                turns += 1
                await asyncio.sleep(0)

        items = [
            item("Register", iid=f"i-{n}", instanceInfo=instance_doc(iid=f"i-{n}"))
            for n in range(1_000)
        ]
        probe = asyncio.ensure_future(other_work())
        answers = await post_batch(client, items)
        applying = False
        await probe
        assert [200] * 1_000 == [a["statusCode"] for a in answers]
        assert turns > 10
        assert 1_000 == len(registry_of(client).application("ORDERS"))

    async def test_a_thousand_malformed_items_are_one_log_line(self, client: TestClient):
        """Each item is answered 400; the log gets one warning for the batch, with counts."""
        items = [item("Explode", iid=f"i-{n}") for n in range(999)]
        with capture_logs() as logs:
            answers = await post_batch(client, [*items, item("Heartbeat", iid="unknown")])
        assert [400] * 999 + [404] == [a["statusCode"] for a in answers]
        (line,) = [e for e in logs if e["log_level"] in ("warning", "error")]
        assert ("replication_items_refused", 999, 1_000) == (
            line["event"],
            line["refused"],
            line["of"],
        )
        assert (
            line["first"].startswith('{"appName":"ORDERS","id":"i-0","action":"Explode"}: ')
            and "action: must be one of" in line["first"]
        )
