"""An admin attaches a check to every instance of an application through the admin plane:
instances that ask for none are checked against real HTTP servers on loopback, later ones too;
the admin's check is run instead of what an instance's metadata asks for, and removing it
gives the instances back to their own; it is refused with a clear 400 for anything but a
check, kept through a restart, and exchanged with peers (a batch item, the digest)."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from registry import FakeClock, Settings, create_app
from registry.appkeys import CHECKER, REGISTRY
from tests.checks.conftest import Port, Target, checks_until, run_checks, served_at
from tests.credentials import basic
from tests.helpers import JSON, instance_doc
from tests.peers.apps import AiohttpClient

ADMIN, CLIENT, PEER = basic("ops", "admin-pw"), basic("svc", "client-pw"), basic("p", "peer-pw")
SETTINGS = Settings.of(
    credentials__clients=("svc:client-pw",),
    credentials__admins=("ops:admin-pw",),
    credentials__peer="p:peer-pw",
    checks__loopback=True,
    checks__min_interval=1,
    store__enabled=False,
)
FAST = {"check": "http", "interval": 1, "timeout": 0.5}


@pytest.fixture
async def node(aiohttp_client: AiohttpClient, clock: FakeClock) -> TestClient:
    return await aiohttp_client(create_app(SETTINGS, clock=clock))


async def register(node: TestClient, document: dict[str, Any]) -> None:
    response = await node.post("/eureka/apps/ORDERS", json={"instance": document}, headers=CLIENT)
    assert 204 == response.status


async def set_check(node: TestClient, body: object, headers: dict[str, str] = ADMIN) -> Any:
    response = await node.put("/eureka/checks/ORDERS", json=body, headers=headers)
    return response.status, await response.json() if response.content_length else None


async def status(node: TestClient, iid: str = "i-1") -> str:
    response = await node.get(f"/eureka/apps/ORDERS/{iid}", headers=JSON | CLIENT)
    return str((await response.json())["instance"]["status"])


def counts(node: TestClient, iid: str = "i-1") -> tuple[int, int]:
    """The instance's failures and successes in a row."""
    checked = node.app[CHECKER].checked[iid]  # type: ignore[index,union-attr]
    return checked.failures, checked.successes


async def explained(node: TestClient, iid: str = "i-1") -> dict[str, Any]:
    response = await node.get(f"/eureka/apps/ORDERS/{iid}/status/explain", headers=ADMIN)
    return (await response.json())["healthCheck"]  # type: ignore[no-any-return]


async def test_every_instance_is_checked_those_registered_later_too(
    node: TestClient, target: tuple[Target, TestServer], clock: FakeClock
):
    service, server = target
    await register(node, served_at("i-1", server.port))  # asks for no check
    answered = await set_check(node, FAST)
    assert 200 == answered[0]
    assert {"instances": 1, "checked": 1, "notCheckable": []} == {
        k: answered[1][k] for k in ("instances", "checked", "notCheckable")
    }
    assert ("http", 1.0, "ops") == tuple(
        answered[1]["check"][k] for k in ("check", "interval", "setBy")
    )
    await register(node, served_at("i-2", server.port))
    service.status = 503
    for iid in ("i-1", "i-2"):
        await checks_until(clock, lambda iid=iid: counts(node, iid)[0] >= 3)
        assert "DOWN" == await status(node, iid)
    check = await explained(node)
    assert ("application", "ops", True) == (check["setOn"], check["setBy"], check["heldDown"])
    service.status = 200
    await checks_until(clock, lambda: counts(node)[1] >= 2)
    assert "UP" == await status(node)


async def test_the_admins_check_is_run_instead_of_the_instances_own_until_removed(
    node: TestClient, target: tuple[Target, TestServer], clock: FakeClock
):
    """The instance asks for GET /health (healthy); the admin's asks /ready, which the
    service does not have (404): DOWN. Removed, the instance's own check decides again."""
    _, server = target
    own = {"registry.check": "http", "registry.check.interval": "1"}
    await register(node, served_at("i-1", server.port, **own))
    assert 200 == (await set_check(node, {**FAST, "path": "/ready"}))[0]
    await checks_until(clock, lambda: counts(node)[0] >= 3)
    assert "DOWN" == await status(node)
    assert (await explained(node))["check"].endswith(f":{server.port}/ready")
    response = await node.delete("/eureka/checks/ORDERS", headers=ADMIN)
    assert 200 == response.status
    assert "DOWN" == await status(node)  # still held: its own check releases it
    await checks_until(clock, lambda: counts(node)[1] >= 2)
    assert "UP" == await status(node)
    assert (await explained(node))["check"].endswith(f":{server.port}/health")


async def test_a_removal_releases_instances_that_ask_for_no_check_and_checks_stop(
    node: TestClient, target: tuple[Target, TestServer], clock: FakeClock
):
    service, server = target
    await register(node, served_at("i-1", server.port))
    await set_check(node, FAST)
    service.status = 500
    await checks_until(clock, lambda: counts(node)[0] >= 3)
    assert 200 == (await node.delete("/eureka/checks/ORDERS", headers=ADMIN)).status
    assert "UP" == await status(node)
    calls = service.calls
    await run_checks(clock, 3)
    assert calls == service.calls
    assert 404 == (await node.get("/eureka/checks/ORDERS", headers=ADMIN)).status
    assert 404 == (await node.delete("/eureka/checks/ORDERS", headers=ADMIN)).status


async def test_instances_it_cannot_reach_are_named_with_why(node: TestClient):
    no_url = instance_doc("ORDERS", "i-1", ipAddr="127.0.0.1", port={"$": 8080, "@enabled": "true"})
    await register(node, no_url)
    status_code, answer = await set_check(node, FAST)
    assert 200 == status_code
    assert (1, 0) == (answer["instances"], answer["checked"])
    [refused] = answer["notCheckable"]
    assert "i-1" == refused["instanceId"] and "healthCheckUrl" in refused["reason"]
    assert "healthCheckUrl" in (await explained(node))["notCheckable"]
    metrics = await (await node.get("/metrics", headers=ADMIN)).text()
    assert "registry_instances_not_checkable 1.0" in metrics
    assert "registry_application_checks 1.0" in metrics
    # With a path, the check goes to the instance's own address and port instead.
    status_code, answer = await set_check(node, {**FAST, "path": "/actuator/health"})
    assert (200, 1) == (status_code, answer["checked"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"check": "icmp"}, "check"),
        ({}, "check"),
        ({**FAST, "interval": 0}, "interval"),
        ({**FAST, "interval": "10"}, "interval"),
        ({**FAST, "interval": True}, "interval"),
        ({**FAST, "timeout": 5}, "timeout"),  # longer than its interval
        ({**FAST, "path": "health"}, "path"),
        ({**FAST, "path": "/a b"}, "path"),
        ({**FAST, "path": "/x" * 600}, "path"),
        ({"check": "tcp", "path": "/health"}, "path"),
        ({**FAST, "url": "http://169.254.169.254/"}, "url"),
        (["http"], "body"),
    ],
)
async def test_anything_but_a_check_is_refused_and_changes_nothing(
    node: TestClient, body: object, field: str
):
    status_code, answer = await set_check(node, body)
    assert 400 == status_code
    assert ("bad_input", field) == (answer["error"], answer["field"])
    assert 404 == (await node.get("/eureka/checks/ORDERS", headers=ADMIN)).status


async def test_it_is_an_admins_call(node: TestClient):
    assert 403 == (await set_check(node, FAST, CLIENT))[0]
    assert 401 == (await set_check(node, FAST, {}))[0]
    response = await node.put("/eureka/checks/ORDERS", data=b"{not json", headers=ADMIN)
    assert 400 == response.status
    assert 404 == (await node.get("/eureka/checks/ORDERS", headers=ADMIN)).status


async def test_a_node_with_checks_off_refuses_one(aiohttp_client: AiohttpClient):
    node = await aiohttp_client(
        create_app(Settings.of(store__enabled=False, checks__enabled=False))
    )
    response = await node.put("/eureka/checks/ORDERS", json=FAST)
    assert 400 == response.status
    assert "checks.enabled is false" in (await response.json())["detail"]


async def test_a_restart_keeps_the_check_and_its_removal(
    aiohttp_client: AiohttpClient, clock: FakeClock
):
    stored = Settings.of(checks__loopback=True)  # the store in this test's ./data
    first = await aiohttp_client(create_app(stored, clock=clock))
    assert 200 == (await first.put("/eureka/checks/ORDERS", json=FAST)).status
    assert 200 == (await first.put("/eureka/checks/BILLING", json={"check": "tcp"})).status
    assert 200 == (await first.delete("/eureka/checks/BILLING")).status
    await first.close()
    second = await aiohttp_client(create_app(stored, clock=clock))
    listed = await (await second.get("/eureka/checks")).json()
    assert [("ORDERS", "http", 1.0)] == [
        (c["app"], c["check"], c["interval"]) for c in listed["checks"]
    ]
    digest = await (await second.get("/eureka/peerreplication/digest")).json()
    assert ["BILLING"] == [r["app"] for r in digest["appChecks"]["removed"]]


async def test_a_peers_decision_is_taken_when_later_and_only_then(node: TestClient):
    def item(set_at: int, kind: str) -> dict[str, Any]:
        fields = {"app": "ORDERS", "check": kind, "interval": 5, "setAt": set_at, "setBy": "x"}
        return {"action": "AppCheck", "appName": "ORDERS", "appCheck": fields}

    async def send(*items: dict[str, Any]) -> list[int]:
        response = await node.post(
            "/eureka/peerreplication/batch", json={"replicationList": list(items)}, headers=PEER
        )
        return [answer["statusCode"] for answer in (await response.json())["responseList"]]

    now = node.app[CHECKER]._clock.wall_ms()  # type: ignore[union-attr]
    assert [200, 200] == await send(item(now - 10, "tcp"), item(now - 20, "http"))
    current = await (await node.get("/eureka/checks/ORDERS", headers=ADMIN)).json()
    assert "tcp" == current["check"]["check"]
    removal = {"action": "AppCheck", "appName": "ORDERS", "appCheckRemoved": {"app": "ORDERS"}}
    ahead = item(now + 3_600_000, "http")
    assert [400, 400] == await send(removal, ahead)  # no time; a time an hour ahead
    current = await (await node.get("/eureka/checks/ORDERS", headers=ADMIN)).json()
    assert "tcp" == current["check"]["check"]


async def test_an_admins_second_call_in_the_same_millisecond_wins(node: TestClient):
    """The clock does not move between them here: the later call is still the one in force
    (not the greater of the two)."""
    assert 200 == (await set_check(node, {"check": "tcp"}))[0]
    status_code, answer = await set_check(node, FAST)
    assert (200, "http") == (status_code, answer["check"]["check"])
    current = await (await node.get("/eureka/checks/ORDERS", headers=ADMIN)).json()
    assert "http" == current["check"]["check"]


async def test_an_application_name_peers_would_refuse_is_refused(node: TestClient):
    response = await node.put(f"/eureka/checks/{'A' * 300}", json=FAST, headers=ADMIN)
    assert (400, "app") == (response.status, (await response.json())["field"])


async def test_a_hold_the_admins_check_cannot_go_on_with_is_let_go(
    node: TestClient, port: Port, clock: FakeClock
):
    """Held DOWN by its own TCP check; the admin's http check (no path) cannot reach it (no
    healthCheckUrl): nothing would ever release it, so it goes, and its client's UP stands."""
    document = instance_doc(
        "ORDERS",
        "i-1",
        ipAddr="127.0.0.1",
        port={"$": port.number, "@enabled": "true"},
        metadata={"registry.check": "tcp", "registry.check.interval": "1"},
    )
    await register(node, document)
    await port.close()
    await checks_until(clock, lambda: counts(node)[0] >= 3)
    assert "DOWN" == await status(node)
    status_code, answer = await set_check(node, FAST)
    assert (200, 0) == (status_code, answer["checked"])
    await checks_until(clock, lambda: "i-1" not in node.app[REGISTRY].checks)
    assert "UP" == await status(node)
