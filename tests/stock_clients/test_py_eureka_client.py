"""py-eureka-client, unmodified from PyPI, against a server this test starts.

The client runs in its own process (its heartbeat thread never stops on its own) and heartbeats
every second, so the whole story takes seconds. It sends `Accept: */*`, so it reads XML.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from registry import Settings, SystemClock, create_app
from registry.appkeys import REGISTRY
from registry.core.registry import Registry
from registry.errors import UnknownInstance
from tests.helpers import eventually, instance_doc
from tests.stock_clients.agent import APP, IID, TIMEOUT, running_agent

POLL = 0.05  # how often the test looks at the registry while the real client works

pytestmark = pytest.mark.slow


def status_in(registry: Registry) -> str | None:
    try:
        return registry.get(APP, IID, now_ms=SystemClock().wall_ms()).instance.status.value
    except UnknownInstance:
        return None


def renewals(registry: Registry) -> int:
    return registry.get(APP, IID, now_ms=SystemClock().wall_ms()).last_renewal_ms


@pytest.fixture
def blockbuster():
    """The client process is outside this loop; the server half is covered elsewhere."""
    return None


async def test_py_eureka_client_lifecycle(aiohttp_client):
    """Register, heartbeat, fetch, override, re-register, delete override, stop."""
    server = TestServer(create_app(Settings.of(leases__eviction_interval=1)), host="127.0.0.1")
    client = await aiohttp_client(server)
    registry = client.app[REGISTRY]
    url = f"http://127.0.0.1:{server.port}/eureka/"
    async with running_agent(url) as agent:
        assert "started" == (await agent.answer())["event"]
        assert "UP" == status_in(registry)

        # Heartbeats arrive, and the client's own fetched copy holds its instance.
        first = renewals(registry)
        await eventually(
            lambda: renewals(registry) > first, timeout=TIMEOUT, what="a heartbeat arrives"
        )
        view = await agent.ask("view")
        assert {APP: {IID: "UP"}} == view["applications"]

        # An admin takes it out of service: heartbeats and re-registration keep it so.
        response = await client.put(f"/eureka/apps/{APP}/{IID}/status?value=OUT_OF_SERVICE")
        assert 200 == response.status
        marked = renewals(registry)
        await eventually(
            lambda: renewals(registry) > marked + 1500, timeout=TIMEOUT, what="two more heartbeats"
        )
        assert "OUT_OF_SERVICE" == status_in(registry)
        assert "registered" == (await agent.ask("register"))["event"]
        assert "OUT_OF_SERVICE" == status_in(registry)

        async def client_sees(status: str) -> None:
            deadline = asyncio.get_running_loop().time() + TIMEOUT
            while (await agent.ask("view"))["applications"].get(APP, {}).get(IID) != status:
                assert asyncio.get_running_loop().time() < deadline, f"client never saw {status}"
                await asyncio.sleep(POLL)

        await client_sees("OUT_OF_SERVICE")

        # Deleting the override: UNKNOWN, a 404 on the next heartbeat, re-registration, UP.
        assert 200 == (await client.delete(f"/eureka/apps/{APP}/{IID}/status")).status
        await eventually(
            lambda: status_in(registry) == "UP", timeout=TIMEOUT, what="the client re-registers UP"
        )
        await client_sees("UP")

        # Stopping the client cancels its instance.
        assert "stopped" == (await agent.ask("stop"))["event"]
        assert None is status_in(registry)
        assert 0 == await asyncio.wait_for(agent.process.wait(), TIMEOUT)


async def test_py_eureka_client_with_credentials_in_its_url(aiohttp_client):
    """Stock clients send Basic credentials from `http://user:pass@host/eureka/` URLs."""
    settings = Settings.of(credentials__clients=("svc:s3cret",), credentials__admins=("ops:adm1n",))
    server = TestServer(create_app(settings), host="127.0.0.1")
    client = await aiohttp_client(server)
    registry = client.app[REGISTRY]
    url = f"http://svc:s3cret@127.0.0.1:{server.port}/eureka/"
    async with running_agent(url) as agent:
        assert "started" == (await agent.answer())["event"]
        assert "UP" == status_in(registry)
        first = renewals(registry)
        await eventually(
            lambda: renewals(registry) > first, timeout=TIMEOUT, what="a heartbeat arrives"
        )
        assert {APP: {IID: "UP"}} == (await agent.ask("view"))["applications"]
        assert "stopped" == (await agent.ask("stop"))["event"]
        assert None is status_in(registry)


async def test_py_eureka_client_stops_calling_an_instance_its_check_holds_down(aiohttp_client):
    """A service behind a server-side check fails: the registry marks it DOWN, and the client,
    which picks UP instances only, stops calling it; it recovers, and is called again."""
    health = {"status": 200}

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=health["status"], text="fine")

    service = web.Application()
    service.router.add_get("/health", answer)
    target = TestServer(service, host="127.0.0.1")
    await target.start_server()
    settings = Settings.of(checks__loopback=True, checks__min_interval=1, checks__failures=2)
    server = TestServer(create_app(settings), host="127.0.0.1")
    client = await aiohttp_client(server)
    doc = instance_doc(
        "ORDERS",
        "orders-1",
        ipAddr="127.0.0.1",
        hostName="127.0.0.1",
        port={"$": target.port, "@enabled": "true"},
        healthCheckUrl=f"http://127.0.0.1:{target.port}/health",
        metadata={"registry.check": "http", "registry.check.interval": "1"},
    )
    assert 204 == (await client.post("/eureka/apps/ORDERS", json={"instance": doc})).status
    try:
        async with running_agent(f"http://127.0.0.1:{server.port}/eureka/") as agent:
            assert "started" == (await agent.answer())["event"]

            async def sees() -> str | None:
                view = (await agent.ask("view"))["applications"]
                return view.get("ORDERS", {}).get("orders-1")  # type: ignore[no-any-return]

            await eventually(sees, lambda status: status == "UP", timeout=TIMEOUT)
            assert "called" == (await agent.ask("call ORDERS"))["event"]
            health["status"] = 503
            await eventually(sees, lambda status: status == "DOWN", timeout=TIMEOUT)
            # Not a failed call: no instance to call (the client picks UP instances only).
            answer = await agent.ask("call ORDERS")
            assert ("call_failed", "WalkNodeException") == (answer["event"], answer["error"])
            health["status"] = 200
            await eventually(sees, lambda status: status == "UP", timeout=TIMEOUT)
            assert "called" == (await agent.ask("call ORDERS"))["event"]
    finally:
        await target.close()
