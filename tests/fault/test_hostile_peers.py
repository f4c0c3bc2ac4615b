"""A hostile DNS answer against real server processes with credentials on every plane.

The answer names 300 addresses for `peer_dns`: the nodes' own (127.0.0.1 and 127.0.0.3), a
listener of the answer's choosing (127.0.0.2, which answers everything 401 with a Basic
challenge, to lure the credential), 291 loopback addresses where nothing listens, and
addresses no peer can have (link-local, a cloud's metadata service, multicast, broadcast).
Before this was fixed, each was a peer: RSS 50 -> 240 MB, a quarter of a core, reads closed
for minutes while the node tried to copy them all, /readyz answering 26 KB of their errors,
and the peer credential sent in clear to the listener.

Every address is on loopback (or refused before anything is sent to it): no traffic leaves
the machine.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from registry.codec.peer_signature import peer_key, sign
from tests.dns_server import StubDns
from tests.fault.test_hostile_clients import ADMIN, CLIENT, JSON, PEER, PROBE_BOUND, Server, auth
from tests.helpers import eventually, free_port, instance_doc
from tests.processes import ServerProcess

pytestmark = pytest.mark.slow

NAME = "registry-peers.test"
A, LISTENER, B = "127.0.0.1", "127.0.0.2", "127.0.0.3"
UNREACHABLE = [f"127.0.{n // 250 + 1}.{n % 250 + 1}" for n in range(291)]
IMPOSSIBLE = ["169.254.169.254", "169.254.7.7", "224.0.0.251", "239.1.2.3", "255.255.255.255"]
ANSWER = [A, LISTENER, B, *UNREACHABLE, *IMPOSSIBLE]
MAX_PEERS = 16
RSS_BOUND_MB = 120  # a node alone holds about 50 MB; 300 peers took 240
PASSWORD = PEER.partition(":")[2]


class Listener:
    """A listener the DNS answer names: records every request, answers each 401 with a
    Basic challenge (what would draw a Basic credential from a client that has one)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> Listener:
        async def any_request(request: web.Request) -> web.Response:
            body = await request.read()
            self.requests.append((request.method, request.raw_path, dict(request.headers), body))
            return web.json_response(
                {"error": "unauthorized"},
                status=401,
                headers={"WWW-Authenticate": 'Basic realm="give it to me"'},
            )

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", any_request)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def stub() -> AsyncIterator[StubDns]:
    server = await StubDns().start()
    server.set(NAME, ANSWER)
    yield server
    server.close()


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
async def listener(port: int) -> AsyncIterator[Listener]:
    made = await Listener().start(LISTENER, port)
    yield made
    await made.close()


@pytest.fixture
async def nodes(
    stub: StubDns, port: int, tmp_path: Path, listener: Listener
) -> AsyncIterator[dict[str, ServerProcess]]:
    """Two nodes, A and B, on one port (as pods have), both given the hostile answer, with
    the Basic fallback on (which a peer found by DNS must never get); started and ready."""
    settings = {
        "store__enabled": "false",
        "limits__fetch_rate_limit": "0",
        "credentials__clients": CLIENT,
        "credentials__admins": ADMIN,
        "credentials__peer": PEER,
        "credentials__peer_basic_fallback": "true",
        "peers__dns_name": NAME,
        "peers__dns_port": port,
        "peers__dns_nameservers": stub.server,
        "peers__dns_interval": 0.5,
        "peers__sync_budget": 1,
        "peers__sync_empty_window": 2,
        "peers__batch_delay": 0.05,
        "peers__max_backoff": 1,
        "peers__anti_entropy_interval": 1,
        "logging__format": "json",
    }
    made = {
        host: ServerProcess(tmp_path / f"{host}.log", port, settings=settings, host=host)
        for host in (A, B)
    }
    try:
        await asyncio.gather(*(node.start() for node in made.values()))
        yield made
    finally:
        await asyncio.gather(*(node.kill() for node in made.values()))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def get(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url, headers=JSON | auth(CLIENT)) as response:
        assert 200 == response.status
        return orjson.loads(await response.read())


async def test_a_300_address_answer_makes_at_most_the_cap_and_sends_no_secret(
    nodes: dict[str, ServerProcess], listener: Listener
) -> None:
    """The node takes 16 peers, the first by address, refuses the addresses no peer can
    have, says so once, stays small and answers heartbeats in time; /readyz names no peer;
    the listener never sees the credential, while the real peer takes the signed batches."""
    a, b = nodes[A], nodes[B]
    async with Server.probing(a) as server:

        async def under_the_answer() -> dict[str, Any]:
            # Lookups every 0.5 s: several answers, each the same 300 addresses
            started = time.monotonic()
            await eventually(
                lambda: get(server.session, server.eureka + "status"),
                lambda s: s["membership"]["dns"]["lookups"] >= 6,
            )
            assert time.monotonic() - started < 10
            status: dict[str, Any] = await get(server.session, server.eureka + "status")
            return status

        status, longest = await server.probed(under_the_answer())
        assert longest < PROBE_BOUND, f"a heartbeat took {longest * 1000:.0f} ms"

        dns = status["membership"]["dns"]
        kept = sorted([LISTENER, B, *UNREACHABLE], key=lambda a: tuple(map(int, a.split("."))))
        wanted = [f"http://{address}:{a.port}/eureka/" for address in kept[:MAX_PEERS]]
        assert wanted == dns["found"] == [p["url"] for p in status["peers"]]
        assert (len(kept) - MAX_PEERS, MAX_PEERS) == (dns["dropped"], dns["maxPeers"])
        assert {"metadata": 1, "link-local": 1, "multicast": 2, "broadcast": 1} == dns["refused"]
        assert rss_mb(a.pid) < RSS_BOUND_MB

        async with server.session.get(a.base + "/readyz") as response:
            readiness = await response.read()
        assert 200 == response.status
        assert len(readiness) < 200 and b"127.0." not in readiness

        logged = [line["event"] for line in await a.log_lines()]
        assert (1, 1) == (logged.count("peer_dns_capped"), logged.count("peer_dns_refused"))

        # Replication with the real peer works on signatures alone.
        doc = {"instance": instance_doc("ORDERS", "i-1")}
        async with server.session.post(
            server.eureka + "apps/ORDERS", json=doc, headers=auth(CLIENT)
        ) as response:
            assert 204 == response.status

        async def on_b() -> int:
            async with server.session.get(
                b.eureka + "apps/ORDERS/i-1", headers=JSON | auth(CLIENT)
            ) as response:
                return response.status

        await eventually(on_b, lambda code: code == 200, what="i-1 replicated to B")

    assert listener.requests, "the listener was never called"
    secrets = (PASSWORD, base64.b64encode(PEER.encode()).decode())
    leaked = [
        (method, path, name)
        for method, path, headers, body in listener.requests
        for name, value in headers.items()
        if any(secret in value for secret in secrets)
    ]
    assert [] == leaked
    schemes = {
        headers.get("Authorization", "").partition(" ")[0] for *_, headers, _ in listener.requests
    }
    assert {"Registry-Peer"} == schemes


async def test_signed_requests_are_good_once_for_their_own_node_path_and_body(
    nodes: dict[str, ServerProcess], listener: Listener
) -> None:
    """What the listener got is refused by the node it is passed on to; a request signed for
    the node passes once, and is refused replayed, or with another body or path."""
    a = nodes[A]
    await eventually(lambda: listener.requests, what="a request to the listener")
    async with aiohttp.ClientSession() as session:

        async def send(
            method: str, path: str, headers: dict[str, str], body: bytes = b""
        ) -> tuple[int, str]:
            async with session.request(
                method, a.base + path, headers=headers, data=body or None
            ) as response:
                answer = orjson.loads(await response.read())
                return response.status, str(answer.get("detail", ""))

        method, path, headers, body = listener.requests[0]
        relayed = {
            k: v
            for k, v in headers.items()
            if k.lower() not in ("content-length", "transfer-encoding")
        }
        status, detail = await send(method, path, relayed, body)
        assert (401, True) == (status, "another node" in detail)

        def signed(method: str, path: str, body: bytes) -> dict[str, str]:
            host = f"{A}:{a.port}"
            authorization = sign(
                peer_key(PEER),
                method=method,
                host=host,
                target=path,
                body=body,
                now_ms=time.time_ns() // 1_000_000,
            )
            return {
                "Authorization": authorization,
                "Host": host,
                "Content-Type": "application/json",
                "x-netflix-discovery-replication": "true",
            }

        batch = "/eureka/peerreplication/batch/"
        item = {
            "action": "Register",
            "appName": "ORDERS",
            "id": "i-2",
            "instanceInfo": instance_doc("ORDERS", "i-2"),
        }
        body = orjson.dumps({"replicationList": [item]})
        other = body.replace(b"i-2", b"i-3")
        status, detail = await send("POST", batch, signed("POST", batch, body), other)
        assert (401, True) == (status, "body" in detail)
        headers = signed("POST", batch, body)
        assert 200 == (await send("POST", batch, headers, body))[0]
        status, detail = await send("POST", batch, headers, body)
        assert (401, True) == (status, "replay" in detail)
        headers = signed("GET", "/eureka/peerreplication/digest", b"")
        assert 401 == (await send("GET", "/eureka/peerreplication/removed", headers))[0]
        async with session.get(a.eureka + "apps/ORDERS", headers=JSON | auth(CLIENT)) as r:
            ids = [i["instanceId"] for i in orjson.loads(await r.read())["application"]["instance"]]
        assert ["i-2"] == ids  # the batch once, and never i-3
