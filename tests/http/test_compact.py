"""`X-Eureka-Accept: compact`: the registry, its delta, an application and VIPs with each
instance cut to what routing reads, as Eureka's server answers it (its MiniInstanceInfoMixIn),
in JSON and XML, kept in the cache like the full forms; any other value, or a single
instance, is answered in full."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import orjson
import pytest
from aiohttp.test_utils import TestClient

from registry.appkeys import CACHE
from tests.helpers import JSON, fetch_json, register

COMPACT = {"X-Eureka-Accept": "compact"}
AMAZON = {
    "@class": "com.netflix.appinfo.AmazonInfo",
    "name": "Amazon",
    "metadata": {
        "availability-zone": "us-east-1b",
        "instance-id": "i-0abc",
        "ami-id": "ami-123",
        "local-ipv4": "10.0.0.9",
    },
}
KEPT = {
    "instanceId",
    "hostName",
    "app",
    "ipAddr",
    "status",
    "port",
    "securePort",
    "dataCenterInfo",
    "vipAddress",
    "secureVipAddress",
    "lastUpdatedTimestamp",
    "actionType",
}


@pytest.fixture
async def registered(client: TestClient) -> TestClient:
    await register(client, "ORDERS", "o-1", dataCenterInfo=AMAZON, homePageUrl="http://x/")
    await register(client, "ORDERS", "o-2", metadata={"zone": "a"})
    return client


async def test_the_registry_in_compact_json(registered: TestClient):
    response = await registered.get("/eureka/apps", headers=JSON | COMPACT)
    assert (200, "application/json") == (response.status, response.content_type)
    document = await response.json()
    [app] = document["applications"]["application"]
    instances = {i["instanceId"]: i for i in app["instance"]}
    assert [KEPT, KEPT] == [set(i) for i in instances.values()]
    assert {
        "availability-zone": "us-east-1b",
        "instance-id": "i-0abc",
        "local-ipv4": "10.0.0.9",
    } == instances["o-1"]["dataCenterInfo"]["metadata"]
    assert "UP_2_" == document["applications"]["apps__hashcode"]


async def test_the_registry_in_compact_xml(registered: TestClient):
    response = await registered.get("/eureka/apps", headers=COMPACT)
    assert "application/xml" == response.content_type
    root = ET.fromstring(await response.read())
    instances = root.findall("application/instance")
    assert 2 == len(instances)
    for instance in instances:
        tags = {child.tag for child in instance}
        assert tags == KEPT, tags ^ KEPT
    amazon = root.find("application/instance[instanceId='o-1']/dataCenterInfo/metadata")
    assert amazon is not None
    assert {"availability-zone", "instance-id", "local-ipv4"} == {c.tag for c in amazon}


@pytest.mark.parametrize("path", ["apps/ORDERS", "apps/delta", "vips/orders", "svips/orders"])
async def test_every_read_eureka_serves_compact_is(registered: TestClient, path: str):
    document = await fetch_json(registered, f"/eureka/{path}")
    full = await (await registered.get(f"/eureka/{path}", headers=JSON | COMPACT)).json()
    assert document != full
    assert b"leaseInfo" not in orjson.dumps(full)
    assert b"leaseInfo" in orjson.dumps(document)


@pytest.mark.parametrize("value", ["full", "Compacted", ""])
async def test_any_other_value_is_the_full_form(registered: TestClient, value: str):
    response = await registered.get("/eureka/apps", headers=JSON | {"X-Eureka-Accept": value})
    assert b"leaseInfo" in await response.read()


async def test_a_single_instance_is_always_full(registered: TestClient):
    response = await registered.get("/eureka/apps/ORDERS/o-2", headers=JSON | COMPACT)
    assert b'"metadata":{"zone":"a"}' in await response.read()


async def test_compact_documents_are_cached_and_follow_changes(registered: TestClient):
    cache = registered.app[CACHE]  # type: ignore[index]
    await registered.get("/eureka/apps", headers=JSON | COMPACT)
    hits = cache.hits
    await registered.get("/eureka/apps", headers=JSON | COMPACT)
    assert hits + 1 == cache.hits
    await register(registered, "ORDERS", "o-3")
    document = await (await registered.get("/eureka/apps", headers=JSON | COMPACT)).json()
    [app] = document["applications"]["application"]
    assert {"o-1", "o-2", "o-3"} == {i["instanceId"] for i in app["instance"]}
