"""Bodies and calls shared by the HTTP tests."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp.test_utils import TestClient

from registry.appkeys import REGISTRY
from registry.core import Registry

JSON = {"Accept": "application/json"}
DEFAULT_DC = {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"}


def instance_doc(app: str = "ORDERS", iid: str = "i-1", **fields: Any) -> dict[str, Any]:
    """An instance in the shape the Netflix Java client sends; `fields` replace or add keys."""
    doc: dict[str, Any] = {
        "instanceId": iid,
        "hostName": f"{iid}.example.internal",
        "app": app,
        "ipAddr": "10.0.0.5",
        "status": "UP",
        "overriddenStatus": "UNKNOWN",
        "port": {"$": 8080, "@enabled": "true"},
        "securePort": {"$": 443, "@enabled": "false"},
        "countryId": 1,
        "dataCenterInfo": dict(DEFAULT_DC),
        "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
        "metadata": {"management.port": "8080"},
        "vipAddress": app.lower(),
        "secureVipAddress": app.lower(),
        "lastDirtyTimestamp": "1735689000000",
    }
    doc.update(fields)
    return {key: value for key, value in doc.items() if value is not ...}


async def register(
    client: TestClient, app: str = "ORDERS", iid: str = "i-1", **fields: Any
) -> None:
    """Register through the API and insist on Eureka's 204."""
    response = await client.post(
        f"/eureka/apps/{app}",
        data=orjson.dumps({"instance": instance_doc(app, iid, **fields)}),
        headers={"Content-Type": "application/json"},
    )
    assert 204 == response.status, await response.text()


async def fetch_json(client: TestClient, path: str) -> Any:
    response = await client.get(path, headers=JSON)
    assert 200 == response.status, await response.text()
    return await response.json()


def registry_of(client: TestClient) -> Registry:
    return client.app[REGISTRY]  # type: ignore[index]
