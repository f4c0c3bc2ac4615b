"""The admin CLI against a real server process on loopback."""

from __future__ import annotations

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.helpers import instance_doc
from tests.processes import Servers, run

pytestmark = pytest.mark.slow


async def cli(*args: str, **settings: str) -> tuple[int, str, str]:
    """`python -m registry ARGS`, with `settings` (`user`, `password`) as REGISTRY_* variables;
    its exit code, stdout and stderr."""
    done = await run(*args, settings=settings)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
async def server(servers: Servers) -> str:
    """A registry process with two ORDERS instances; its base URL."""
    server = await servers.start()
    async with aiohttp.ClientSession() as session:
        for iid in ("i-1", "i-2"):
            body = orjson.dumps({"instance": instance_doc("ORDERS", iid)})
            async with session.post(
                f"{server.eureka}apps/ORDERS",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as response:
                assert 204 == response.status
    return server.eureka


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


async def test_an_applications_check_set_listed_and_removed(server):
    code, out, _ = await cli("check", "orders", "tcp", "--interval", "5", "--server", server)
    assert 0 == code
    assert out.startswith("ORDERS: ") and out.splitlines()[0].endswith("of 2 instances checked")
    code, out, _ = await cli("checks", "--server", server)
    assert ["ORDERS", "tcp", "5", "2"] == out.splitlines()[1].split()
    code, out, _ = await cli("uncheck", "ORDERS", "--server", server)
    assert (0, "ORDERS: check removed\n") == (code, out)
    code, _, err = await cli("check", "ORDERS", "http", "--path", "health", "--server", server)
    assert 1 == code and "400" in err and "path" in err
    code, _, err = await cli("uncheck", "ORDERS", "--server", server)
    assert 1 == code and "404" in err


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
    url = str(fake.make_url("/eureka/"))
    code, out, err = await cli("status", "--server", url, user="ops", password="s3cret")
    assert ["Basic b3BzOnMzY3JldA=="] == seen
    assert (1, "") == (code, out)
    assert "401 who are you" in err and "s3cret" not in err


async def test_against_a_secured_server_the_admin_token_passes_and_a_client_is_refused(servers):
    """A real secured process: flags beat the environment; a client credential gets 403."""
    settings = {"credentials__clients": "svc:client-pw", "credentials__admin_tokens": "adm1n-token"}
    url = (await servers.start(**settings)).eureka
    client = {"user": "svc", "password": "client-pw"}
    code, _, err = await cli("status", "--server", url, **client)
    assert 0 == code, err
    args = ("out-of-service", "ORDERS", "i-1", "--server", url)
    code, _, err = await cli(*args, **client)
    assert 1 == code and "403" in err and "client-pw" not in err
    code, _, err = await cli(*args, "--token", "adm1n-token", **client)
    assert 1 == code and "404" in err  # through the admin plane: no such instance
