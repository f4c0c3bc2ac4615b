"""The admin CLI against a real server process on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.bench import processes
from tests.helpers import instance_doc
from tests.test_cli import start

pytestmark = pytest.mark.slow

TIMEOUT = 30.0


async def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    process = await start(*args, env=env)
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
async def server() -> AsyncIterator[str]:
    """A registry process with two ORDERS instances; its base URL."""
    async with processes.registry() as server, aiohttp.ClientSession() as session:
        for iid in ("i-1", "i-2"):
            body = orjson.dumps({"instance": instance_doc("ORDERS", iid)})
            async with session.post(
                f"{server.url}/eureka/apps/ORDERS",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as response:
                assert 204 == response.status
        yield f"{server.url}/eureka/"


async def test_apps_and_instances_tables(server):
    code, out, _ = await cli("apps", "--server", server)
    assert 0 == code
    assert ["APPLICATION", "INSTANCES", "BY", "STATUS", "ORDERS", "2", "2", "UP"] == out.split()
    code, out, _ = await cli("instances", "orders", "--server", server)
    assert 0 == code
    lines = out.splitlines()
    assert lines[0].split() == ["INSTANCE", "STATUS", "OVERRIDE", "ADDRESS"]
    assert {"i-1", "i-2"} == {line.split()[0] for line in lines[1:]}


async def test_out_of_service_explain_and_back(server):
    code, out, _ = await cli(
        "out-of-service", "ORDERS", "i-1", "--reason", "disk swap", "--expires", "8h",
        "--server", server,
    )  # fmt: skip
    assert (0, "ORDERS/i-1 is OUT_OF_SERVICE\n") == (code, out)
    code, out, _ = await cli("explain", "ORDERS", "i-1", "--server", server)
    assert 0 == code
    assert out.startswith("ORDERS/i-1 is OUT_OF_SERVICE, decided by an admin's override")
    assert "override reason: disk swap" in out
    code, out, _ = await cli("explain", "ORDERS", "i-1", "--json", "--server", server)
    assert "disk swap" == orjson.loads(out)["override"]["reason"]
    code, out, _ = await cli("instances", "ORDERS", "--server", server)
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()[1:]}
    assert ["OUT_OF_SERVICE", "OUT_OF_SERVICE"] == rows["i-1"]
    code, out, _ = await cli("in-service", "ORDERS", "i-1", "--server", server)
    assert 0 == code
    code, out, _ = await cli("explain", "ORDERS", "i-1", "--json", "--server", server)
    assert ("UP", None) == (orjson.loads(out)["status"], orjson.loads(out)["override"])


async def test_status(server):
    code, out, _ = await cli("status", "--server", server)
    assert 0 == code
    assert "instances: 2;" in out
    assert "eviction: runs:" in out
    assert "store: writing" in out


async def test_errors_say_why_and_exit_1(server):
    code, _, err = await cli("explain", "ORDERS", "nobody", "--server", server)
    assert 1 == code
    assert "404" in err and "nobody" in err
    code, _, err = await cli("apps", "--server", "http://127.0.0.1:9/eureka/")
    assert 1 == code
    assert "cannot reach http://127.0.0.1:9/eureka/" in err


async def test_credentials_are_sent_from_the_environment(aiohttp_server):
    """REGISTRY_USER / REGISTRY_PASSWORD go as HTTP Basic; they are never printed."""
    seen = []

    async def status(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"error": "unauthorized", "detail": "who are you"}, status=401)

    app = web.Application()
    app.router.add_get("/eureka/status", status)
    fake = await aiohttp_server(app)
    env = {"REGISTRY_USER": "ops", "REGISTRY_PASSWORD": "s3cret", "PATH": ""}
    code, out, err = await cli("status", "--server", str(fake.make_url("/eureka/")), env=env)
    assert ["Basic b3BzOnMzY3JldA=="] == seen
    assert (1, "") == (code, out)
    assert "401 who are you" in err and "s3cret" not in err


async def test_against_a_secured_server_the_admin_token_passes_and_a_client_is_refused():
    """A real secured process: flags beat the environment; a client credential gets 403."""
    settings = {"client_credentials": "svc:client-pw", "admin_tokens": "adm1n-token"}
    async with processes.registry(ready_path="/healthz", **settings) as server:
        url = f"{server.url}/eureka/"
        client_env = {"REGISTRY_USER": "svc", "REGISTRY_PASSWORD": "client-pw", "PATH": ""}
        code, _, err = await cli("status", "--server", url, env=client_env)
        assert 0 == code, err
        args = ("out-of-service", "ORDERS", "i-1", "--server", url)
        code, _, err = await cli(*args, env=client_env)
        assert 1 == code and "403" in err and "client-pw" not in err
        code, _, err = await cli(*args, "--token", "adm1n-token", env=client_env)
        assert 1 == code and "404" in err  # through the admin plane: no such instance
