"""Our payloads against the contract's own examples (sections 4.5, 4.6, 5.2), field for field."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import orjson
import pytest

from registry import FakeClock, Settings
from tests.helpers import JSON

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
REGISTER_ORDERS = json.loads((GOLDEN / "register_orders.json").read_text())
APPS_FULL = json.loads((GOLDEN / "apps_full.json").read_text())
APP_ORDERS_XML = (GOLDEN / "app_orders.xml").read_text()
START_MS = 1_735_689_000_123


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start_ms=START_MS)


@pytest.fixture
def settings() -> Settings:
    # The example renews long after registration: keep the evictor out of the way.
    return Settings.of(leases__eviction_interval=86_400)


async def advance_to(clock: FakeClock, ms: int) -> None:
    await clock.advance((ms - clock.wall_ms()) / 1000)


def body_for(expected: dict, **changes: object) -> bytes:
    """A register body for one instance of the example, in the Java client's shape."""
    instance = copy.deepcopy(expected)
    for key in ("actionType", "leaseInfo"):
        instance.pop(key)
    instance["leaseInfo"] = {"renewalIntervalInSecs": 30, "durationInSecs": 90}
    if instance["metadata"].get("@class"):
        instance["metadata"] = {}
    instance.update(changes)
    return orjson.dumps({"instance": instance})


async def post(client, app: str, body: bytes, content_type: str = "application/json") -> None:
    response = await client.post(
        f"/eureka/apps/{app}", data=body, headers={"Content-Type": content_type}
    )
    assert 204 == response.status, await response.text()


def example_instances() -> dict[str, dict]:
    return {
        i["instanceId"]: i
        for app in APPS_FULL["applications"]["application"]
        for i in app["instance"]
    }


async def test_full_registry_matches_the_contract_example(client, clock):
    """Rebuilding section 4.6's state through the API yields exactly its document."""
    examples = example_instances()
    await post(client, "ORDERS", orjson.dumps(REGISTER_ORDERS))
    await advance_to(clock, 1_735_689_100_000)
    await post(client, "ORDERS", body_for(examples["10.0.0.6:orders:8080"]))
    await advance_to(clock, 1_735_689_200_000)
    await post(client, "PAYMENTS", body_for(examples["10.0.0.7:payments:9090"]))
    for ms, path in (
        (1_735_689_380_000, "PAYMENTS/10.0.0.7:payments:9090"),
        (1_735_689_390_456, "ORDERS/10.0.0.5:orders:8080"),
        (1_735_689_395_000, "ORDERS/10.0.0.6:orders:8080"),
    ):
        await advance_to(clock, ms)
        assert 200 == (await client.put(f"/eureka/apps/{path}")).status

    response = await client.get("/eureka/apps/", headers=JSON)
    assert "application/json" == response.content_type
    raw = await response.read()
    assert APPS_FULL == orjson.loads(raw)
    ours = orjson.loads(raw)["applications"]["application"][0]["instance"][0]
    theirs = APPS_FULL["applications"]["application"][0]["instance"][0]
    assert list(theirs) == list(ours), "fields must come in the legacy serializer's order"


async def test_spring_shaped_body_registers_identically(client, clock):
    """Section 4.5's Spring variant (nulls, numeric timestamps, JSON boolean) reads the same."""
    spring = copy.deepcopy(REGISTER_ORDERS)
    spring["instance"].update(
        sid="na",
        appGroupName=None,
        secureHealthCheckUrl=None,
        actionType=None,
        asgName=None,
        isCoordinatingDiscoveryServer=False,
        lastUpdatedTimestamp=1735689000000,
        lastDirtyTimestamp=1735689000000,
    )
    await post(client, "ORDERS", orjson.dumps(spring))
    via_spring = await (await client.get("/eureka/apps/ORDERS", headers=JSON)).json()
    await post(client, "ORDERS", orjson.dumps(REGISTER_ORDERS))
    via_netflix = await (await client.get("/eureka/apps/ORDERS", headers=JSON)).json()
    assert via_netflix == via_spring


async def test_application_xml_matches_the_contract_example(client, clock):
    """Section 5.2's XML, requested with no Accept header, comes back element for element."""
    await post(client, "ORDERS", orjson.dumps(REGISTER_ORDERS))
    await advance_to(clock, 1_735_689_390_456)
    assert 200 == (await client.put("/eureka/apps/ORDERS/10.0.0.5:orders:8080")).status

    response = await client.get("/eureka/apps/orders", skip_auto_headers=["Accept"])
    assert "application/xml" == response.content_type
    expected = re.sub(r">\s+<", "><", APP_ORDERS_XML.strip())
    assert expected == await response.text()


async def test_xml_register_body_reads_like_json(client, clock):
    """The XML form of an instance registers the same instance as its JSON form."""
    xml_body = re.sub(r">\s+<", "><", APP_ORDERS_XML.strip())
    instance_xml = xml_body[xml_body.index("<instance>") : xml_body.index("</application>")]
    await post(client, "ORDERS", instance_xml.encode(), "application/xml")
    via_xml = await (await client.get("/eureka/apps/ORDERS", headers=JSON)).json()
    await post(client, "ORDERS", orjson.dumps(REGISTER_ORDERS))
    via_json = await (await client.get("/eureka/apps/ORDERS", headers=JSON)).json()
    assert via_json == via_xml
