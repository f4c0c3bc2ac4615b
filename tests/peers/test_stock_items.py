"""The batches a real stock Eureka server sent (tests/peers/stock_items/, one fixture per Eureka
version, recorded by its capture tool) replayed in order against a node of ours, on a clock
set to the times they were sent. Our node stands where the capture's replying peer stood (a
stock node of the same version that got those very batches, less those the capture withheld
from it): every item is answered as that peer answered it, and after each step our node's
view is that peer's, field by field.

Fields left out of the comparison, and why:
- leaseInfo's registrationTimestamp, lastRenewalTimestamp, serviceUpTimestamp and
  lastUpdatedTimestamp: each node stamps them with its own time of receipt (the stock node
  when its client called, ours when the batch came, milliseconds later);
- versions__delta and actionType: each node's own record of its changes (Eureka's versions
  count its delta's builds; actionType is what its last delta said of the instance);
- fields a stock node adds of its own (isCoordinatingDiscoveryServer) and ours adds
  (our notes and checks): neither is in the other's items;
- the override of an instance that is gone: ours keeps an admin's override through a cancel,
  and Eureka drops it (docs/differences.md, "Admin decisions stick"); the overrides of the
  instances both hold are compared.
"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from registry import FakeClock, Settings, create_app
from registry.appkeys import REGISTRY
from tests.peers.stock_items import FIXTURES

JSON = {"Accept": "application/json"}
START_BEFORE_MS = 1_000  # the node starts this long before the first step
# What a stock node's view says of an instance that our view must say too.
COMPARED = (
    "instanceId",
    "app",
    "hostName",
    "ipAddr",
    "status",
    "overriddenStatus",
    "port",
    "securePort",
    "countryId",
    "dataCenterInfo",
    "metadata",
    "vipAddress",
    "secureVipAddress",
    "lastDirtyTimestamp",
)
LEASE_COMPARED = ("renewalIntervalInSecs", "durationInSecs", "evictionTimestamp")
ACTIONS = {"Register", "Heartbeat", "Cancel", "StatusUpdate", "DeleteStatusOverride"}

Client = Callable[..., Any]


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(gzip.decompress(path.read_bytes()))
    return document


@dataclass
class Replayed:
    """One captured request to the stock node's peer, replayed on ours."""

    step: str
    sent: dict[str, Any]
    status: int
    answers: list[dict[str, Any]]


@dataclass
class Step:
    """A step replayed: what our node answered and its view after."""

    name: str
    replayed: list[Replayed]
    view: Any
    overrides: dict[str, str]
    expected: dict[str, Any]


async def replay(
    client: TestClient, clock: FakeClock, document: dict[str, Any]
) -> AsyncIterator[Step]:
    """Post every request the stock node sent to its peer, in order, each when it was sent."""
    for step in document["steps"]:
        replayed = []
        for sent in step["sent"]:
            if not sent["relayed"]:
                continue  # the replying peer never got it (a batch lost on the way)
            await clock.advance(max(0, sent["at_ms"] - clock.wall_ms()) / 1000)
            headers = {k: v for k, v in sent["headers"].items() if k != "Accept-Encoding"}
            data = None if sent["body"] is None else orjson.dumps(sent["body"])
            query = sent["query"] or None
            response = await client.request(
                sent["method"], sent["path"], params=query, data=data, headers=headers
            )
            body = await response.json() if response.content_type == "application/json" else None
            answers = body.get("responseList", []) if isinstance(body, dict) else []
            replayed.append(Replayed(step["name"], sent, response.status, answers))
        await clock.advance(max(0, step["at_ms"] - clock.wall_ms()) / 1000)
        response = await client.get("/eureka/apps", headers=JSON)
        assert 200 == response.status, await response.text()
        overrides = {iid: s.value for iid, s in client.app[REGISTRY].overrides.items()}  # type: ignore[index]
        expected = step["peerView"] or step["view"]  # null: the stock node's own
        yield Step(step["name"], replayed, await response.json(), overrides, expected)


def instances(view: Any) -> dict[str, dict[str, Any]]:
    """A `GET apps` document's instances by id."""
    found = {}
    for app in view["applications"]["application"]:
        for instance in app["instance"]:
            found[instance["instanceId"]] = instance
    return found


def differences(ours: Any, eureka: Any) -> list[str]:
    """Where our view differs from the stock node's on the compared fields."""
    mine, theirs = instances(ours), instances(eureka)
    found = []
    if sorted(mine) != sorted(theirs):
        found.append(f"instances: ours {sorted(mine)}, Eureka's {sorted(theirs)}")
    for iid in sorted(set(mine) & set(theirs)):
        for key in COMPARED:
            if mine[iid].get(key) != theirs[iid].get(key):
                found.append(
                    f"{iid}.{key}: ours {mine[iid].get(key)!r}, Eureka's {theirs[iid].get(key)!r}"
                )
        for key in LEASE_COMPARED:
            a, b = mine[iid]["leaseInfo"].get(key), theirs[iid]["leaseInfo"].get(key)
            if a != b:
                found.append(f"{iid}.leaseInfo.{key}: ours {a!r}, Eureka's {b!r}")
    a, b = ours["applications"]["apps__hashcode"], eureka["applications"]["apps__hashcode"]
    if a != b:
        found.append(f"apps__hashcode: ours {a!r}, Eureka's {b!r}")
    return found


def eurekas_overrides(view: Any) -> dict[str, str]:
    """The overrides in force on the stock node: the instances it shows overridden."""
    return {
        iid: instance["overriddenStatus"]
        for iid, instance in instances(view).items()
        if instance.get("overriddenStatus", "UNKNOWN") != "UNKNOWN"
    }


@pytest.fixture(params=FIXTURES, ids=lambda path: path.stem)
def document(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load(request.param)


@pytest.fixture
def clock(document: dict[str, Any]) -> FakeClock:
    """The time of the capture: the items' timestamps are then neither ahead nor stale."""
    return FakeClock(start_ms=document["steps"][0]["at_ms"] - START_BEFORE_MS)


@pytest.fixture
async def client(aiohttp_client: Client, clock: FakeClock) -> TestClient:
    app = create_app(Settings.of(store__enabled=False), clock=clock)
    test_client: TestClient = await aiohttp_client(app)
    return test_client


class TestFixtures:
    def test_both_lines_of_eureka_are_captured(self):
        """A fixture of Eureka 2.0 and one of the 1.10 line are there."""
        cores = {load(path)["eureka"]["core"].rsplit(".", 1)[0] for path in FIXTURES}
        assert {"1.10", "2.0"} <= cores

    def test_every_action_a_stock_node_sends_is_there(self, document: dict[str, Any]):
        """Each fixture holds every action of Eureka's replication, and the items a bare
        DELETE, an admin's UNKNOWN and an override under a heartbeat make: a
        DeleteStatusOverride and a StatusUpdate naming UNKNOWN, a Heartbeat naming its
        overriddenStatus."""
        items = [
            item
            for step in document["steps"]
            for sent in step["sent"]
            if isinstance(sent["body"], dict)
            for item in sent["body"]["replicationList"]
        ]
        assert ACTIONS == {item["action"] for item in items}
        assert any(
            item["action"] == "DeleteStatusOverride" and item["status"] == "UNKNOWN"
            for item in items
        )
        assert any(
            item["action"] == "StatusUpdate" and item["status"] == "UNKNOWN" for item in items
        )
        assert any(item["action"] == "Heartbeat" and "overriddenStatus" in item for item in items)


class TestReplay:
    async def test_items_are_answered_as_eureka_answered_them(
        self, client: TestClient, clock: FakeClock, document: dict[str, Any]
    ):
        """Every request is answered 200, and every item with the statusCode the stock peer
        gave it."""
        async for step in replay(client, clock, document):
            for replayed in step.replayed:
                where = f"{step.name}: {replayed.sent['path']}"
                assert replayed.sent["status"] == replayed.status, where
                eurekas = [a["statusCode"] for a in replayed.sent["peerAnswer"]["responseList"]]
                ours = [a["statusCode"] for a in replayed.answers]
                assert eurekas == ours, f"{where}: {replayed.answers}"

    async def test_our_view_is_eurekas_after_every_step(
        self, client: TestClient, clock: FakeClock, document: dict[str, Any]
    ):
        """After each step our node holds the instances the stock node holds, with the same
        statuses, overrides and data."""
        async for step in replay(client, clock, document):
            assert [] == differences(step.view, step.expected), step.name
            present = instances(step.expected)
            ours = {iid: s for iid, s in step.overrides.items() if iid in present}
            assert eurekas_overrides(step.expected) == ours, step.name
