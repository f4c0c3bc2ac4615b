"""Server-side health checks against real HTTP and TCP servers on loopback that answer
healthy, then fail, then recover: the instance goes DOWN after the configured failures and UP
after the successes, seen through a fetch, the delta and status/explain; an admin's override
stands; a check that would go anywhere but the instance is refused with a 400.

The registry runs on a fake clock: each step moves it a little and lets the real checks'
round trips happen."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from registry import FakeClock, Settings, create_app
from registry.appkeys import CHECKER, REGISTRY
from tests.checks.conftest import Port, Target, checks_until, run_checks
from tests.credentials import ADMIN_PW, CLIENT_PW, basic
from tests.helpers import JSON, free_port, instance_doc, next_event
from tests.peers.apps import AiohttpClient

CHECKED = {
    "registry.check": "http",
    "registry.check.interval": "1",
    "registry.check.timeout": "0.5",
}


# Checks to loopback (the targets' servers), as often as the tests ask: the store is on
LOOPBACK = Settings.of(checks__loopback=True, checks__min_interval=1)


@pytest.fixture
async def node(aiohttp_client: AiohttpClient, clock: FakeClock) -> TestClient:
    settings = Settings.of(store__enabled=False, checks__loopback=True, checks__min_interval=1)
    return await aiohttp_client(create_app(settings, clock=clock))


def checked_doc(port: int, **metadata: str) -> dict[str, Any]:
    return instance_doc(
        "ORDERS",
        "i-1",
        ipAddr="127.0.0.1",
        hostName="orders-1.internal",
        port={"$": port, "@enabled": "true"},
        healthCheckUrl=f"http://127.0.0.1:{port}/health",
        metadata={**CHECKED, **metadata},
    )


async def register(node: TestClient, doc: dict[str, Any]) -> int:
    response = await node.post("/eureka/apps/ORDERS", json={"instance": doc})
    return response.status


async def status(node: TestClient) -> str:
    document = await (await node.get("/eureka/apps/ORDERS/i-1", headers=JSON)).json()
    return str(document["instance"]["status"])


def in_a_row(node: TestClient) -> tuple[int, int]:
    """The instance's failures and successes in a row."""
    checked = node.app[CHECKER].checked["i-1"]  # type: ignore[index,union-attr]
    return checked.failures, checked.successes


class TestHttpCheck:
    async def test_down_after_failures_and_up_after_successes(
        self, node: TestClient, target: tuple[Target, TestServer], clock: FakeClock
    ):
        service, server = target
        assert 204 == await register(node, checked_doc(server.port))
        await checks_until(clock, lambda: service.calls >= 1 and in_a_row(node)[1] >= 1)
        assert "UP" == await status(node)
        service.status = 503
        await checks_until(clock, lambda: in_a_row(node)[0] == 2)
        assert "UP" == await status(node)  # two failures: not yet
        await checks_until(clock, lambda: in_a_row(node)[0] == 3)
        assert "DOWN" == await status(node)
        delta = await (await node.get("/eureka/apps/delta", headers=JSON)).json()
        [entry] = [i for a in delta["applications"]["application"] for i in a["instance"]]
        assert ("DOWN", "MODIFIED") == (entry["status"], entry["actionType"])
        explained = await (await node.get("/eureka/apps/ORDERS/i-1/status/explain")).json()
        check = explained["healthCheck"]
        assert (True, "HTTP 503", "UP") == (
            check["heldDown"],
            check["heldDownBecause"],
            check["clientClaims"],
        )
        assert "DownOrStarting" == explained["decidedBy"]
        service.status = 200
        await checks_until(clock, lambda: in_a_row(node)[1] == 1)
        assert "DOWN" == await status(node)  # one success: still held
        await checks_until(clock, lambda: in_a_row(node)[1] == 2)
        assert "UP" == await status(node)

    async def test_the_watch_stream_tells_of_the_verdicts(
        self, node: TestClient, target: tuple[Target, TestServer], clock: FakeClock
    ):
        service, server = target
        stream = await node.get("/eureka/watch")
        assert "watching" == (await next_event(stream))["event"]
        await register(node, checked_doc(server.port))
        service.status = 503
        await checks_until(clock, lambda: in_a_row(node)[0] == 3)
        service.status = 200
        await checks_until(clock, lambda: in_a_row(node)[1] == 2)
        events = [await next_event(stream) for _ in range(3)]
        assert [("ADDED", "UP"), ("MODIFIED", "DOWN"), ("MODIFIED", "UP")] == [
            (e["event"], e["data"]["instance"]["status"]) for e in events
        ]
        stream.close()

    async def test_an_override_stands_through_a_recovery(
        self, node: TestClient, target: tuple[Target, TestServer], clock: FakeClock
    ):
        service, server = target
        await register(node, checked_doc(server.port))
        await node.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        service.status = 500
        await checks_until(clock, lambda: in_a_row(node)[0] == 3)
        assert "DOWN" == await status(node)
        service.status = 200
        await checks_until(clock, lambda: in_a_row(node)[1] == 2)
        assert "OUT_OF_SERVICE" == await status(node)

    async def test_a_cancelled_instance_is_checked_no_more(
        self, node: TestClient, target: tuple[Target, TestServer], clock: FakeClock
    ):
        service, server = target
        await register(node, checked_doc(server.port))
        await checks_until(clock, lambda: service.calls >= 1)
        assert 200 == (await node.delete("/eureka/apps/ORDERS/i-1")).status
        calls = service.calls
        await run_checks(clock, 3)
        assert calls == service.calls


class TestSchedule:
    async def test_registering_again_leaves_one_check_going(
        self, node: TestClient, clock: FakeClock, port: Port
    ):
        """Each registration that changes what the check asks for starts it afresh: the
        check before it goes, it does not run on beside it."""
        for timeout in ("0.5", "0.6", "0.5", "0.6", "0.5"):  # A, B, A, B, A
            doc = checked_doc(
                port.number, **{"registry.check": "tcp", "registry.check.timeout": timeout}
            )
            assert 204 == await register(node, doc)
        await run_checks(clock, 1.5)  # the first check, within its interval
        before = port.accepted
        await run_checks(clock, 10)
        assert 8 <= port.accepted - before <= 12  # one a second

    async def test_a_fault_of_the_registrys_is_no_verdict_and_checks_go_on(
        self, node: TestClient, clock: FakeClock, port: Port, monkeypatch: pytest.MonkeyPatch
    ):
        """A check that raises what no probe should (a bug, injected here) is logged and
        counted, holds nobody DOWN, and the next checks run as due."""
        faults = 0

        async def failing(spec: Any, clock: FakeClock) -> None:
            nonlocal faults
            faults += 1
            raise RuntimeError("a bug")

        monkeypatch.setattr("registry.checks.checker.probe", failing)
        doc = checked_doc(port.number, **{"registry.check": "tcp"})
        assert 204 == await register(node, doc)
        await checks_until(clock, lambda: faults >= 4)
        assert "UP" == await status(node)
        metrics = await (await node.get("/metrics")).text()
        errors = float(metrics.split("\nregistry_health_check_errors_total ")[1].split()[0])
        assert errors >= 4


class TestTcpCheck:
    async def test_a_closed_port_is_down_and_an_open_one_up(
        self, node: TestClient, clock: FakeClock, port: Port
    ):
        doc = checked_doc(port.number, **{"registry.check": "tcp"})
        assert 204 == await register(node, doc)
        await checks_until(clock, lambda: port.accepted >= 1 and in_a_row(node)[1] >= 1)
        assert "UP" == await status(node)
        await port.close()
        await checks_until(clock, lambda: in_a_row(node)[0] == 3)
        assert "DOWN" == await status(node)
        page = await (await node.get("/")).text()
        assert f"tcp 127.0.0.1:{port.number}: connection refused" in page
        assert "1 held DOWN by their check" in page
        metrics = await (await node.get("/metrics")).text()
        assert "registry_instances_down_by_check 1.0" in metrics
        assert "registry_health_check_failures_total 3.0" in metrics
        await port.open()  # the same port again
        await checks_until(clock, lambda: in_a_row(node)[1] == 2)
        assert "UP" == await status(node)


class TestGuardRails:
    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            ({"healthCheckUrl": "http://10.9.9.9:8080/health"}, "not this instance"),
            ({"healthCheckUrl": "http://127.0.0.1:9999/health"}, "not this instance's 8080"),
            ({"healthCheckUrl": "ftp://127.0.0.1:8080/health"}, "not an http"),
            ({"healthCheckUrl": None}, "needs a healthCheckUrl"),
            ({"ipAddr": "orders.internal"}, "is not an address"),
            ({"healthCheckUrl": "http://[::1/health"}, "is not a URL"),
        ],
    )
    async def test_a_check_aimed_elsewhere_is_refused(
        self, node: TestClient, fields: dict[str, Any], message: str
    ):
        doc = {**checked_doc(8080), **fields}
        response = await node.post("/eureka/apps/ORDERS", json={"instance": doc})
        assert 400 == response.status
        assert message in (await response.json())["detail"]
        assert 404 == (await node.get("/eureka/apps/ORDERS/i-1", headers=JSON)).status

    @pytest.mark.parametrize(
        ("metadata", "message"),
        [
            ({"registry.check": "icmp"}, "is not one of http, tcp"),
            ({"registry.check.interval": "0.1"}, "is not from 1 to 3600"),
            ({"registry.check.interval": "\uff15"}, "is not a number of seconds"),
            ({"registry.check.timeout": "soon"}, "is not a number of seconds"),
        ],
    )
    async def test_bad_check_metadata_is_refused(
        self, node: TestClient, metadata: dict[str, str], message: str
    ):
        response = await node.post(
            "/eureka/apps/ORDERS", json={"instance": checked_doc(8080, **metadata)}
        )
        assert 400 == response.status
        assert message in (await response.json())["detail"]

    @pytest.mark.parametrize(
        "address",
        [
            "127.0.0.1",
            "::ffff:127.0.0.1",  # IPv4-mapped: Python 3.11 calls it no loopback
            "::ffff:169.254.169.254",  # a cloud's metadata service, mapped
            "64:ff9b::a9fe:a9fe",  # the same through NAT64
            "2002:7f00:1::1",  # 6to4 of 127.0.0.1
            "fd00:ec2::254",  # the metadata service by IPv6
            "240.0.0.1",  # reserved
        ],
    )
    async def test_special_addresses_are_refused_however_written(
        self, aiohttp_client: AiohttpClient, clock: FakeClock, address: str
    ):
        node = await aiohttp_client(create_app(Settings.of(store__enabled=False), clock=clock))
        doc = {**checked_doc(8080, **{"registry.check": "tcp"}), "ipAddr": address}
        response = await node.post("/eureka/apps/ORDERS", json={"instance": doc})
        assert 400 == response.status
        body = await response.json()
        assert ("ipAddr", True) == (body["field"], "not checked" in body["detail"])

    async def test_a_private_address_outside_the_networks_is_registered_unchecked(
        self, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        """The operator lists the networks checks may go to; until then an instance asking
        for a check of a private address is registered all the same, unchecked, and the
        answer says why: an upgrade must not turn a fleet's registrations away."""
        node = await aiohttp_client(create_app(Settings.of(store__enabled=False), clock=clock))
        doc = {**checked_doc(8080, **{"registry.check": "tcp"}), "ipAddr": "10.1.2.3"}
        response = await node.post("/eureka/apps/ORDERS", json={"instance": doc})
        assert 204 == response.status
        said = response.headers["X-Registry-Registration"]
        assert said.startswith("registered, not checked") and "checks.networks" in said
        explain = await node.get("/eureka/apps/ORDERS/i-1/status/explain", headers=JSON)
        assert "checks.networks" in (await explain.json())["healthCheck"]["notCheckable"]

    async def test_loopback_is_refused_unless_allowed(
        self, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        node = await aiohttp_client(create_app(Settings.of(store__enabled=False), clock=clock))
        response = await node.post("/eureka/apps/ORDERS", json={"instance": checked_doc(8080)})
        assert 400 == response.status
        assert "checks.loopback" in (await response.json())["detail"]

    async def test_an_admin_metadata_change_is_held_to_the_same_rules(self, node: TestClient):
        doc = {**checked_doc(8080), "metadata": {"management.port": "8080"}}
        assert 204 == await register(node, doc)
        response = await node.put("/eureka/apps/ORDERS/i-1/metadata?registry.check=icmp")
        assert 400 == response.status
        assert 200 == (await node.put("/eureka/apps/ORDERS/i-1/metadata?registry.check=tcp")).status


class TestQuota:
    """`checks.max_per_credential` caps a client credential's checked instances; an
    admin's registrations are the operator's own and count against no quota."""

    async def test_a_client_is_held_to_its_quota_and_an_admin_to_none(
        self, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        settings = Settings.of(
            store__enabled=False,
            checks__loopback=True,
            checks__min_interval=1,
            checks__max_per_credential=1,
            credentials__clients=(f"orders:{CLIENT_PW}",),
            credentials__admins=(f"ops:{ADMIN_PW}",),
        )
        node = await aiohttp_client(create_app(settings, clock=clock))

        async def register_as(who: dict[str, str], iid: str) -> int:
            doc = {**checked_doc(8080), "instanceId": iid}
            response = await node.post("/eureka/apps/ORDERS", json={"instance": doc}, headers=who)
            return response.status

        client, admin = basic("orders", CLIENT_PW), basic("ops", ADMIN_PW)
        assert [204, 403] == [await register_as(client, iid) for iid in ("i-1", "i-2")]
        assert [204, 204] == [await register_as(admin, iid) for iid in ("i-2", "i-3")]


class TestRestart:
    async def test_a_hold_outlives_a_restart_and_is_released_by_the_check(
        self, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        """Stored with the instance's DOWN: the restarted node still holds it, so the check's
        recovery releases it (without the hold, the stored DOWN would pass for the client's
        own and stay)."""
        listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        listener.close()
        await listener.wait_closed()
        settings = LOOPBACK  # the store in this test's ./data
        first = await aiohttp_client(create_app(settings, clock=clock))
        assert 204 == await register(first, checked_doc(port, **{"registry.check": "tcp"}))
        await checks_until(clock, lambda: in_a_row(first)[0] == 3)
        assert "DOWN" == await status(first)
        await first.close()
        second = await aiohttp_client(create_app(settings, clock=clock))
        assert "DOWN" == await status(second)
        explained = await (await second.get("/eureka/apps/ORDERS/i-1/status/explain")).json()
        assert (True, "UP") == (
            explained["healthCheck"]["heldDown"],
            explained["healthCheck"]["clientClaims"],
        )
        listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port)
        try:
            await checks_until(clock, lambda: in_a_row(second)[1] == 2)
            assert "UP" == await status(second)
        finally:
            listener.close()
            await listener.wait_closed()

    async def test_a_hold_that_changed_no_status_is_stored_too(
        self, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        """Its client says DOWN itself: the check's hold changes nothing clients see, but it
        is kept through a restart all the same (else the client's next UP would pass for
        healthy there until the check failed again)."""
        port = free_port()  # nothing listens: the check fails
        settings = LOOPBACK
        first = await aiohttp_client(create_app(settings, clock=clock))
        doc = {**checked_doc(port, **{"registry.check": "tcp"}), "status": "DOWN"}
        assert 204 == await register(first, doc)
        await checks_until(clock, lambda: in_a_row(first)[0] == 3)
        assert "i-1" in first.app[REGISTRY].checks
        await first.close()
        second = await aiohttp_client(create_app(settings, clock=clock))
        assert "i-1" in second.app[REGISTRY].checks

    async def test_a_node_started_with_checks_off_lets_its_holds_go(
        self, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        """Nothing would ever release them: the client's own claim decides again."""
        port = free_port()  # nothing listens: the check fails
        first = await aiohttp_client(create_app(LOOPBACK, clock=clock))
        assert 204 == await register(first, checked_doc(port, **{"registry.check": "tcp"}))
        await checks_until(clock, lambda: in_a_row(first)[0] == 3)
        await first.close()
        second = await aiohttp_client(create_app(Settings.of(checks__enabled=False), clock=clock))
        assert "UP" == await status(second)


class TestVerdicts:
    async def test_the_digest_gives_this_nodes_word_once_it_has_one(
        self, node: TestClient, target: tuple[Target, TestServer], clock: FakeClock
    ):
        """Held, or free once its checks here passed as often as a release takes: peers take
        it as the last word. Before that, nothing is said."""
        service, server = target

        async def verdicts() -> dict[str, Any]:
            digest = await (await node.get("/eureka/peerreplication/digest")).json()
            return digest["checkVerdicts"]  # type: ignore[no-any-return]

        await register(node, checked_doc(server.port))
        assert {} == await verdicts()
        await checks_until(clock, lambda: in_a_row(node)[1] == 2)
        assert {"i-1": {"app": "ORDERS", "held": False}} == await verdicts()
        service.status = 503
        await checks_until(clock, lambda: in_a_row(node)[0] == 3)
        assert {"i-1": {"app": "ORDERS", "held": True}} == await verdicts()

    async def test_a_peers_hold_comes_with_its_registration_only_when_that_wins(
        self, node: TestClient
    ):
        """A hold rides on a peer's registration; one older than ours is not taken, and
        neither is its hold: our newer copy decides with ours."""
        ours = {**checked_doc(9), "lastDirtyTimestamp": "1735689000500"}
        assert 204 == await register(node, ours)
        held = {"claim": "UP", "since": 1735689000000, "detail": "HTTP 503"}

        async def replicate(dirty: int) -> None:
            copy = {**checked_doc(9), "lastDirtyTimestamp": str(dirty)}
            item = {
                "action": "Register",
                "appName": "ORDERS",
                "id": "i-1",
                "lastDirtyTimestamp": dirty,
                "instanceInfo": copy,
                "checkHeld": held,
            }
            response = await node.post(
                "/eureka/peerreplication/batch",
                json={"replicationList": [item]},
                headers={"X-Registry-Peer": "1"},
            )
            assert [200] == [a["statusCode"] for a in (await response.json())["responseList"]]

        await replicate(1735689000100)  # older than ours
        assert "UP" == await status(node)
        assert "i-1" not in node.app[REGISTRY].checks
        await replicate(1735689000900)  # newer
        assert "DOWN" == await status(node)
        assert "i-1" in node.app[REGISTRY].checks
