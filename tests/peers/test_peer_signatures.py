"""Peers prove they hold the peer credential by signing each request, never by sending it: a
real secured node takes a signature made for it once, and refuses a replay, another path, body,
time, credential or address; a node sends no secret, and Basic only to a peer listed in
`peers` that refuses the signature, when `peer_basic_fallback` says so."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from peers.cluster import Cluster
from peers.transport import PeerClient, PeerRefused, Signer, new_session
from registry import FakeClock, create_app
from registry.codec.peer_signature import peer_key, sign
from registry.core.registry import Registry
from registry.http import peer_signatures
from registry.settings import load_settings
from tests.credentials import AS_PEER, PEER_PW, SECURED
from tests.helpers import instance_doc
from tests.peers.apps import AiohttpServer, has

CREDENTIAL = f"peer:{PEER_PW}"
DIGEST = "/eureka/peerreplication/digest"
BATCH = "/eureka/peerreplication/batch/"


@pytest.fixture
async def peer(aiohttp_server: AiohttpServer, clock: FakeClock) -> TestServer:
    settings = load_settings(None, {}, store__enabled=False, **_secrets()).settings
    return await aiohttp_server(create_app(settings, clock=clock))


def _secrets() -> dict[str, object]:
    return {
        "credentials__clients": SECURED.credentials.clients,
        "credentials__admins": SECURED.credentials.admins,
        "credentials__peer": SECURED.credentials.peer,
    }


def signed(
    server: TestServer,
    clock: FakeClock,
    path: str,
    *,
    method: str = "GET",
    body: bytes = b"",
    host: str | None = None,
    credential: str = CREDENTIAL,
    skew: float = 0,
) -> dict[str, str]:
    """The headers of a request signed as our nodes sign, for `server` (or `host`)."""
    host = host or f"{server.host}:{server.port}"
    authorization = sign(
        peer_key(credential),
        method=method,
        host=host,
        target=path,
        body=body,
        now_ms=clock.wall_ms() + round(skew * 1000),
    )
    return {"Authorization": authorization, "Host": host, "Content-Type": "application/json"}


def batch_of(iid: str) -> bytes:
    """A batch registering instance `iid` of ORDERS."""
    item = {
        "action": "Register",
        "appName": "ORDERS",
        "id": iid,
        "instanceInfo": instance_doc("ORDERS", iid),
    }
    return orjson.dumps({"replicationList": [item]})


async def call(
    server: TestServer, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, object]]:
    async with (
        new_session(connect_timeout=1, read_timeout=5) as session,
        session.request(method, server.make_url(path), headers=headers, data=body) as response,
    ):
        return response.status, orjson.loads(await response.read())


class TestReceiver:
    async def test_a_signature_made_for_this_node_passes_once(self, peer, clock):
        headers = signed(peer, clock, DIGEST)
        assert 200 == (await call(peer, "GET", DIGEST, headers))[0]
        status, answer = await call(peer, "GET", DIGEST, headers)
        assert (401, "unauthorized") == (status, answer["error"])
        assert "replay" in str(answer["detail"])

    async def test_a_signed_batch_is_applied(self, peer, clock):
        body = batch_of("i-1")
        status, answer = await call(
            peer, "POST", BATCH, signed(peer, clock, BATCH, method="POST", body=body), body
        )
        assert (200, [{"statusCode": 200}]) == (status, answer["responseList"])
        assert has(peer, "i-1")

    async def test_another_body_under_a_signature_is_refused_and_applies_nothing(self, peer, clock):
        """The body is not in the header: a captured signature with another body is
        refused where the body is read, before anything is made of it."""
        headers = signed(peer, clock, BATCH, method="POST", body=batch_of("i-1"))
        async with (
            new_session(connect_timeout=1, read_timeout=5) as session,
            session.post(peer.make_url(BATCH), headers=headers, data=batch_of("i-2")) as response,
        ):
            challenges = response.headers.getall("WWW-Authenticate")
            answer = (response.status, challenges, orjson.loads(await response.read()))
        detail = "the request's body is not the one its Registry-Peer signature names"
        challenge = 'Registry-Peer realm="service-registry"'
        assert (401, [challenge], {"error": "unauthorized", "detail": detail}) == answer
        assert not has(peer, "i-1") and not has(peer, "i-2")

    async def test_a_signed_call_is_made_in_the_peer_credentials_user_name(
        self, aiohttp_server: AiohttpServer, clock
    ):
        """A signature proves the peer credential, and names its user (up to the first colon:
        the password may hold more): the status page a peer fetches says whom it is signed
        in as."""
        credential = "peer:pass:word"
        settings = load_settings(
            None, {}, store__enabled=False, **{**_secrets(), "credentials__peer": credential}
        ).settings
        peer = await aiohttp_server(create_app(settings, clock=clock))
        headers = signed(peer, clock, "/", credential=credential)
        async with (
            ClientSession() as session,
            session.get(peer.make_url("/"), headers=headers) as response,
        ):
            page = await response.text()
        assert 200 == response.status, page
        assert "Signed in as <strong>peer</strong> (read only)" in page

    @pytest.mark.parametrize(
        ("change", "why"),
        [
            ({"path": "/eureka/peerreplication/removed"}, "does not hold"),
            ({"path": DIGEST + "?app=ORDERS"}, "does not hold"),
            ({"credential": "peer:another-pw"}, "does not hold"),
            ({"skew": -301}, "max_clock_skew"),
            ({"skew": 301}, "max_clock_skew"),
        ],
    )
    async def test_a_signature_for_another_request_is_refused(
        self, peer, clock, change: dict[str, object], why: str
    ):
        path = str(change.pop("path", DIGEST))
        headers = signed(peer, clock, path, **change)  # type: ignore[arg-type]
        status, answer = await call(peer, "GET", DIGEST, headers)
        assert 401 == status
        assert why in str(answer["detail"])

    async def test_a_signature_made_for_another_address_is_refused(self, peer, clock):
        """What a listener a DNS answer named got, signed for its own address, is refused
        by a real node it is passed on to."""
        headers = signed(peer, clock, DIGEST, host=f"127.0.0.77:{peer.port}")
        status, answer = await call(peer, "GET", DIGEST, headers)
        assert (401, "unauthorized") == (status, answer["error"])
        assert "another node" in str(answer["detail"])

    @pytest.mark.parametrize(
        "value",
        [
            "Registry-Peer",
            "Registry-Peer ts=1,nonce=a,body=b",
            "Registry-Peer ts=x,nonce=a,body=b,sig=c",
            "Registry-Peer ts=1,nonce=a b,body=b,sig=c",
            "Registry-Peer ts=1,ts=2,nonce=a,body=b,sig=c",
            "Registry-Peer ts=1" + "1" * 5000 + ",nonce=a,body=b,sig=c",
            "Registry-Peer ts=\uff11,nonce=a,body=b,sig=c",  # a full-width digit
        ],
    )
    async def test_a_malformed_signature_is_a_401(self, peer, value: str):
        status, answer = await call(peer, "GET", DIGEST, {"Authorization": value})
        assert (401, "unauthorized") == (status, answer["error"])

    async def test_a_signature_after_more_than_one_space_is_read_as_one(self, peer, clock):
        """The scheme is the header's first word: what follows it is the signature."""
        headers = signed(peer, clock, DIGEST)
        scheme, _, value = headers["Authorization"].partition(" ")
        headers["Authorization"] = f"{scheme}  {value}"
        assert 200 == (await call(peer, "GET", DIGEST, headers))[0]

    async def test_basic_still_passes_as_stock_eureka_servers_send_it(self, peer):
        assert 200 == (await call(peer, "GET", DIGEST, AS_PEER))[0]

    async def test_the_nonces_held_are_bounded_and_forgotten_after_the_window(
        self, peer, clock, monkeypatch: pytest.MonkeyPatch
    ):
        monkeypatch.setattr(peer_signatures, "MAX_NONCES", 3)
        for _ in range(3):
            assert 200 == (await call(peer, "GET", DIGEST, signed(peer, clock, DIGEST)))[0]
        status, answer = await call(peer, "GET", DIGEST, signed(peer, clock, DIGEST))
        assert (429, "too_many_requests") == (status, answer["error"])
        await clock.advance(301)
        assert 200 == (await call(peer, "GET", DIGEST, signed(peer, clock, DIGEST)))[0]


class Recorder:
    """A listener that answers every request 401 (as one that wants a credential would),
    recording each request's headers; with `basic`, it takes that Basic credential."""

    def __init__(self, basic: str = "") -> None:
        self.headers: list[dict[str, str]] = []
        self.basic = basic
        self.epoch = "e-1"

    def app(self) -> web.Application:
        async def any_request(request: web.Request) -> web.Response:
            self.headers.append(dict(request.headers))
            epoch = {"X-Registry-Epoch": self.epoch}
            if self.basic and request.headers.get("Authorization") == self.basic:
                return web.json_response({}, headers=epoch)
            return web.json_response({"error": "unauthorized"}, status=401, headers=epoch)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", any_request)
        return app

    def schemes(self) -> list[str]:
        return [h.get("Authorization", "").partition(" ")[0] for h in self.headers]


@pytest.fixture
async def session() -> AsyncIterator[object]:
    made = new_session(connect_timeout=1, read_timeout=5)
    yield made
    await made.close()


def _basic() -> str:
    return "Basic " + base64.b64encode(CREDENTIAL.encode()).decode()


class TestSender:
    async def test_no_request_carries_the_credential(self, aiohttp_server, session, clock):
        recorder = Recorder()
        server = await aiohttp_server(recorder.app())
        client = PeerClient(session, str(server.make_url("/eureka/")), Signer(CREDENTIAL, clock))
        for call_peer in (client.fetch_registry, client.fetch_digest, client.fetch_removed):
            with pytest.raises(PeerRefused):
                await call_peer()
        with pytest.raises(PeerRefused):
            await client.send_batch([b"{}"])
        assert ["Registry-Peer"] * 4 == recorder.schemes()
        secret = (PEER_PW, base64.b64encode(CREDENTIAL.encode()).decode())
        assert [] == [
            v for h in recorder.headers for v in h.values() if any(s in v for s in secret)
        ]

    async def test_basic_to_a_peer_that_refuses_the_signature_only_when_allowed(
        self, aiohttp_server, session, clock
    ):
        """An earlier release takes Basic only: with the fallback, the call is made again
        with it, and later calls send it at once until an answer says the peer restarted (a
        new epoch: it may have been upgraded, so the next call is signed again)."""
        recorder = Recorder(basic=_basic())
        server = await aiohttp_server(recorder.app())
        url = str(server.make_url("/eureka/"))
        refused = PeerClient(session, url, Signer(CREDENTIAL, clock))
        with pytest.raises(PeerRefused):
            await refused.fetch_digest()
        assert ["Registry-Peer"] == recorder.schemes()

        recorder.headers.clear()
        allowed = PeerClient(session, url, Signer(CREDENTIAL, clock), basic_fallback=True)
        assert {} == await allowed.fetch_digest()
        assert {} == await allowed.fetch_digest()
        recorder.epoch = "e-2"  # restarted
        assert {} == await allowed.fetch_digest()
        assert {} == await allowed.fetch_digest()
        assert ["Registry-Peer", "Basic", "Basic", "Basic", "Registry-Peer", "Basic"] == (
            recorder.schemes()
        )

    async def test_only_peers_listed_in_the_setting_may_get_basic(self, clock):
        """A peer a DNS answer named never does, whatever the setting says."""
        listed = "http://127.0.0.3:8761/eureka/"
        settings = load_settings(
            None,
            {},
            peers__urls=[listed],
            peers__dns_name="registry-peers.test",
            peers__dns_nameservers=["127.0.0.1:9"],
            credentials__peer_basic_fallback=True,
            **_secrets(),
        ).settings
        cluster = Cluster(Registry(), clock, settings)
        await cluster.start()
        try:
            cluster.dns_found([listed, "http://127.0.0.4:8761/eureka/"])
            fallback = {url: d.peer.basic_fallback for url, d in cluster.dispatchers.items()}
        finally:
            await cluster.aclose()
        assert {listed: True, "http://127.0.0.4:8761/eureka/": False} == fallback
