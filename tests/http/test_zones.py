"""Zones: an instance's zone is its `zone` metadata, else its Amazon data-center info's
availability-zone; `?zone=` limits apps, apps/{app}, vips and svips to it (each hashed over
what it shows), the delta stays whole (clients merge it), and /metrics counts by zone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from registry.appkeys import CACHE
from registry.core.registry import Registry
from registry.http import metrics_api
from registry.http.metrics_api import InstanceCounts
from tests.factories import T0, make
from tests.helpers import JSON, fetch_json, register

AMAZON = {
    "@class": "com.netflix.appinfo.AmazonInfo",
    "name": "Amazon",
    "metadata": {"availability-zone": "us-east-1b", "instance-id": "i-0abc"},
}


@pytest.fixture
async def zoned(client: TestClient) -> TestClient:
    await register(client, "ORDERS", "a-1", metadata={"zone": "eu-1a"})
    await register(client, "ORDERS", "a-2", metadata={"zone": "eu-1a"}, status="DOWN")
    await register(client, "ORDERS", "b-1", dataCenterInfo=AMAZON)
    # Its metadata names a zone: that one, over its data center's.
    await register(client, "ORDERS", "c-1", dataCenterInfo=AMAZON, metadata={"zone": "eu-1c"})
    await register(client, "ORDERS", "n-1")
    await register(client, "BILLING", "x-1", metadata={"zone": "eu-1a"})
    return client


def ids(document: dict[str, Any]) -> set[str]:
    apps = document["applications"]["application"]
    return {i["instanceId"] for a in apps for i in a["instance"]}


async def test_a_full_fetch_limited_to_a_zone_is_hashed_over_what_it_shows(zoned: TestClient):
    document = await fetch_json(zoned, "/eureka/apps?zone=eu-1a")
    assert {"a-1", "a-2", "x-1"} == ids(document)
    assert "DOWN_1_UP_2_" == document["applications"]["apps__hashcode"]
    assert {"b-1"} == ids(await fetch_json(zoned, "/eureka/apps/?zone=us-east-1b"))
    assert {"c-1"} == ids(await fetch_json(zoned, "/eureka/apps?zone=eu-1c"))
    xml = await (await zoned.get("/eureka/apps?zone=eu-1c")).text()
    assert "<instanceId>c-1</instanceId>" in xml and "b-1" not in xml


async def test_one_application_limited_to_a_zone(zoned: TestClient):
    document = await fetch_json(zoned, "/eureka/apps/ORDERS?zone=eu-1a")
    assert {"a-1", "a-2"} == {i["instanceId"] for i in document["application"]["instance"]}
    empty = await fetch_json(zoned, "/eureka/apps/ORDERS?zone=mars-1")
    assert [] == empty["application"]["instance"]


async def test_vips_limited_to_a_zone(zoned: TestClient):
    assert {"a-1", "a-2"} == ids(await fetch_json(zoned, "/eureka/vips/orders?zone=eu-1a"))
    assert {"b-1"} == ids(await fetch_json(zoned, "/eureka/svips/orders?zone=us-east-1b"))


async def test_a_zone_no_instance_is_in_is_answered_empty_and_not_kept(zoned: TestClient):
    cached = len(zoned.app[CACHE])  # type: ignore[index]
    for n in range(20):
        document = await fetch_json(zoned, f"/eureka/apps?zone=made-up-{n}")
        assert [] == document["applications"]["application"]
        await fetch_json(zoned, f"/eureka/apps/ORDERS?zone=made-up-{n}")
    assert cached == len(zoned.app[CACHE])  # type: ignore[index]


async def test_the_delta_stays_whole(zoned: TestClient):
    assert {"a-1", "a-2", "b-1", "c-1", "n-1", "x-1"} == ids(
        await fetch_json(zoned, "/eureka/apps/delta?zone=eu-1a")
    )


async def test_a_change_shows_in_the_zones_documents(zoned: TestClient):
    assert {"b-1"} == ids(await fetch_json(zoned, "/eureka/apps?zone=us-east-1b"))
    # An admin moves a-1 to the other zone (Spring Cloud LoadBalancer follows `zone`).
    response = await zoned.put("/eureka/apps/ORDERS/a-1/metadata?zone=us-east-1b")
    assert 200 == response.status
    assert {"a-1", "b-1"} == ids(await fetch_json(zoned, "/eureka/apps?zone=us-east-1b"))
    assert {"a-1", "b-1"} == ids(await fetch_json(zoned, "/eureka/vips/orders?zone=us-east-1b"))
    assert {"a-2", "x-1"} == ids(await fetch_json(zoned, "/eureka/apps?zone=eu-1a"))


@pytest.mark.parametrize("query", ["zone=", "zone=%01", "zone=" + "z" * 300])
async def test_a_zone_that_is_no_name_is_refused(zoned: TestClient, query: str):
    response = await zoned.get(f"/eureka/apps?{query}", headers=JSON)
    assert (400, "zone") == (response.status, (await response.json())["field"])


async def test_metrics_count_by_zone(zoned: TestClient):
    async def by_zone() -> dict[str, float]:
        text = await (await zoned.get("/metrics")).text()
        rows = [
            line for line in text.splitlines() if line.startswith("registry_instances_by_zone{")
        ]
        return {row.split('"')[1]: float(row.split()[-1]) for row in rows}

    assert {"eu-1a": 3, "us-east-1b": 1, "eu-1c": 1, "": 1} == await by_zone()
    assert 200 == (await zoned.delete("/eureka/apps/ORDERS/a-1")).status
    await register(zoned, "ORDERS", "n-2", metadata={"zone": "eu-1c"})
    assert {"eu-1a": 2, "us-east-1b": 1, "eu-1c": 2, "": 1} == await by_zone()


def test_a_small_bulk_load_is_counted_by_zone_at_once_and_kept_from_then_on():
    registry, counts = Registry(), InstanceCounts()
    registry.subscribe(counts)
    registry.load([make("i-1", metadata={"zone": "z1"}), make("i-2")], now_ms=T0)
    assert {"z1": 1, "": 1} == counts.zones(registry)
    registry.register(make("i-3", metadata={"zone": "z1"}), now_ms=T0)
    assert {"z1": 2, "": 1} == counts.zones(registry)


async def test_a_large_bulk_load_is_counted_in_slices_with_what_changed_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
):
    """Off the start-up and off the scrape: a scrape meanwhile shows no zones yet."""
    monkeypatch.setattr(metrics_api, "COUNTED_AT_ONCE", 0)
    monkeypatch.setattr(metrics_api, "SLICE", 1)
    monkeypatch.setattr(metrics_api, "Pacer", lambda: _EveryTurn())
    registry, counts = Registry(), InstanceCounts()
    registry.subscribe(counts)
    registry.load([make(f"i-{n}", metadata={"zone": "z1"}) for n in range(3)], now_ms=T0)
    assert counts.zones(registry) is None  # the count starts
    await asyncio.sleep(0)  # it has taken its snapshot, and counts a slice a turn
    registry.register(make("i-9", metadata={"zone": "z2"}), now_ms=T0)  # meanwhile
    registry.cancel("ORDERS", "i-0", now_ms=T0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert {"z1": 2, "z2": 1} == counts.zones(registry)


class _EveryTurn:
    """A pacer that gives the loop a turn after every slice."""

    async def pace(self) -> bool:
        await asyncio.sleep(0)
        return True


@pytest.mark.parametrize("weight", ["0", "-3", "1.5", "heavy", "99999999999", "%C2%B2"])
async def test_a_weight_spring_would_ignore_is_refused(zoned: TestClient, weight: str):
    """Spring Cloud LoadBalancer reads `weight` as a whole number above 0, else weighs 1."""
    response = await zoned.put(f"/eureka/apps/ORDERS/a-1/metadata?weight={weight}")
    assert (400, "metadata.weight") == (response.status, (await response.json())["field"])
    assert 200 == (await zoned.put("/eureka/apps/ORDERS/a-1/metadata?weight=5")).status


async def test_zones_past_the_largest_are_summed_in_metrics(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
):
    """Zones come from clients: made-up ones cannot grow the scrape without bound."""
    monkeypatch.setattr(metrics_api, "MAX_ZONES", 2)
    for n, zone in enumerate(["a", "a", "a", "b", "b", "c"]):
        await register(client, "ORDERS", f"i-{n}", metadata={"zone": zone})
    text = await (await client.get("/metrics")).text()
    rows = [line for line in text.splitlines() if line.startswith("registry_instances_by_zone{")]
    assert {"a": 3.0, "b": 2.0, "(other zones)": 1.0} == {
        row.split('"')[1]: float(row.split()[-1]) for row in rows
    }
