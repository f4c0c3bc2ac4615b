"""Authentication by plane: who may call what once credentials are configured (issue 7, item 1).

The endpoint lists below are written out by hand, not read from the route table, so that a route
moved to the wrong plane fails here.
"""

from __future__ import annotations

import base64

import orjson
import pytest
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from registry import Settings, create_app
from registry.codec.peer_signature import peer_key, sign
from registry.core.model import InstanceStatus
from registry.http.auth import Credentials, Role
from registry.settings import SettingsError
from tests.credentials import (
    ADMIN_PW,
    AS_ADMIN,
    AS_BEARER,
    AS_CLIENT,
    AS_PEER,
    CLIENT_PW,
    PEER_PW,
    SECURED,
    TOKEN,
    basic,
)
from tests.helpers import instance_doc, registry_of

NOBODY: dict[str, str] = {}
WRONG = [basic("svc", "guess"), basic("ops", CLIENT_PW), {"Authorization": "Bearer guess"}]
GARBLED = [{"Authorization": "Basic !!!"}, {"Authorization": "Digest x"}, {"Authorization": ""}]
REPLICATION = {"x-netflix-discovery-replication": "true"}
BODY = orjson.dumps({"instance": instance_doc("ORDERS", "i-1")})

# Each with what an admin's call answers: the first is the admin's password, the second the
# bearer token's (a check removed by the first is gone for the second).
ADMIN_ENDPOINTS = [
    ("PUT", "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE", (200, 200)),
    ("DELETE", "/eureka/apps/ORDERS/i-1/status", (200, 200)),
    ("PUT", "/eureka/v2/apps/ORDERS/i-1/metadata?zone=b", (200, 200)),
    ("GET", "/eureka/apps/ORDERS/i-1/status/explain", (200, 200)),
    ("GET", "/eureka/overrides", (200, 200)),
    ("GET", "/eureka/overrides/history", (200, 200)),
    ("GET", "/eureka/serverinfo/statusoverrides", (200, 200)),
    ("GET", "/eureka/checks", (200, 200)),
    ("PUT", "/eureka/checks/ORDERS", (200, 200)),
    ("DELETE", "/eureka/v2/checks/ORDERS", (200, 404)),
]
PEER_ENDPOINTS = [
    ("POST", "/eureka/peerreplication/batch"),
    ("GET", "/eureka/v2/peerreplication/digest"),
    ("GET", "/eureka/peerreplication/removed?app=ORDERS"),
]
CLIENT_ENDPOINTS = [
    ("POST", "/eureka/apps/ORDERS"),
    ("PUT", "/eureka/apps/ORDERS/i-1"),
    ("GET", "/eureka/apps"),
    ("GET", "/eureka/apps/delta"),
    ("GET", "/eureka/v2/apps/ORDERS"),
    ("GET", "/eureka/apps/ORDERS/i-1"),
    ("GET", "/eureka/instances/i-1"),
    ("GET", "/eureka/vips/orders"),
    ("GET", "/eureka/svips/orders"),
    ("GET", "/eureka/status"),
    ("GET", "/metrics"),
    ("DELETE", "/eureka/apps/ORDERS/i-1"),
]
OPEN_ENDPOINTS = [("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/openapi.json")]


@pytest.fixture
def settings() -> Settings:
    return SECURED


@pytest.fixture
async def client(client: TestClient) -> TestClient:
    """The secured server with ORDERS/i-1 registered (by a client)."""
    response = await client.post("/eureka/apps/ORDERS", data=BODY, headers=_json(AS_CLIENT))
    assert 204 == response.status, await response.text()
    return client


def _json(headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "Content-Type": "application/json", "Accept": "application/json"}


async def call(client: TestClient, method: str, path: str, headers: dict[str, str]) -> int:
    data = {
        ("POST", True): b'{"replicationList": []}',
        ("POST", False): BODY,
        ("PUT", False): b'{"check": "tcp"}' if path.endswith("/checks/ORDERS") else None,
    }.get((method, path.endswith("batch")))
    response = await client.request(method, path, headers=_json(headers), data=data)
    if response.status in (401, 403):
        assert "application/json" == response.content_type
        assert {"error", "detail"} <= set(await response.json())
    return response.status


def untouched(client: TestClient) -> None:
    """A refused call changed nothing: no override, and the instance still UP."""
    registry = registry_of(client)
    assert {} == registry.overrides
    lease = registry.get("ORDERS", "i-1", now_ms=registry_of(client).index)
    assert InstanceStatus.UP is lease.instance.status
    assert "zone" not in lease.instance.metadata


@pytest.mark.parametrize(("method", "path", "answers"), ADMIN_ENDPOINTS)
async def test_admin_endpoints_refuse_everyone_but_an_admin(client, method, path, answers):
    if method == "DELETE" and "/checks/" in path:  # something to remove
        assert 200 == await call(client, "PUT", path.replace("/v2", ""), AS_ADMIN)
    for headers in (NOBODY, *WRONG, *GARBLED):
        assert 401 == await call(client, method, path, headers), headers
    for headers in (AS_CLIENT, AS_PEER):
        assert 403 == await call(client, method, path, headers), headers
    if "/checks/" not in path:
        untouched(client)
    assert answers == (
        await call(client, method, path, AS_ADMIN),
        await call(client, method, path, AS_BEARER),
    )


@pytest.mark.parametrize(("method", "path"), PEER_ENDPOINTS)
async def test_peer_endpoints_refuse_everyone_but_a_peer(client, method, path):
    for headers in (NOBODY, *WRONG, *GARBLED):
        assert 401 == await call(client, method, path, headers), headers
    for headers in (AS_CLIENT, AS_ADMIN, AS_BEARER):
        assert 403 == await call(client, method, path, headers), headers
    assert 200 == await call(client, method, path, AS_PEER)


@pytest.mark.parametrize(("method", "path"), CLIENT_ENDPOINTS)
async def test_client_endpoints_need_a_credential_of_this_node(client, method, path):
    for headers in (NOBODY, *WRONG, *GARBLED):
        assert 401 == await call(client, method, path, headers), headers
    untouched(client)
    # Each credential's call is answered as a client's is (a cancel: the instance registered
    # again first).
    success = {"POST": 204}.get(method, 200)
    for headers in (AS_CLIENT, AS_ADMIN, AS_BEARER, AS_PEER):
        if method == "DELETE":
            assert 204 == await call(client, "POST", "/eureka/apps/ORDERS", AS_CLIENT)
        assert success == await call(client, method, path, headers), headers


@pytest.mark.parametrize(("method", "path"), OPEN_ENDPOINTS)
async def test_probes_and_the_api_document_are_open(client, method, path):
    assert 200 == await call(client, method, path, NOBODY)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/eureka/apps/ORDERS/i-1"),
        ("POST", "/eureka/apps/ORDERS"),
        ("PUT", "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE"),
    ],
)
async def test_a_call_claiming_to_be_replication_needs_the_peer_credential(client, method, path):
    for headers in (AS_CLIENT, AS_ADMIN, AS_BEARER):
        assert 403 == await call(client, method, path, {**headers, **REPLICATION})
    assert 401 == await call(client, method, path, REPLICATION)
    untouched(client)
    success = {"POST": 204}.get(method, 200)
    assert success == await call(client, method, path, {**AS_PEER, **REPLICATION})


async def test_a_401_challenges_for_basic_and_on_the_admin_plane_for_bearer(client):
    response = await client.get("/eureka/apps")
    assert ['Basic realm="service-registry", charset="UTF-8"'] == response.headers.getall(
        "WWW-Authenticate"
    )
    response = await client.get("/eureka/overrides")
    assert 2 == len(response.headers.getall("WWW-Authenticate"))
    assert 'Bearer realm="service-registry"' in response.headers.getall("WWW-Authenticate")
    refused = await client.get("/eureka/overrides", headers=AS_CLIENT)
    assert (403, None) == (refused.status, refused.headers.get("WWW-Authenticate"))


BASIC = 'Basic realm="service-registry", charset="UTF-8"'
BEARER = 'Bearer realm="service-registry"'
UNKNOWN = {"error": "unauthorized", "detail": "credentials missing or not recognised"}


def needs(setting: str) -> dict[str, str]:
    return {
        "error": "forbidden",
        "detail": f"this credential may not call this; it needs {setting}",
    }


@pytest.mark.parametrize(
    ("method", "path", "headers", "answer"),
    [
        ("GET", "/eureka/apps", NOBODY, (401, [BASIC], UNKNOWN)),
        ("GET", "/eureka/apps", WRONG[0], (401, [BASIC], UNKNOWN)),
        ("GET", "/eureka/overrides", NOBODY, (401, [BASIC, BEARER], UNKNOWN)),
        (
            "GET",
            "/eureka/overrides",
            AS_CLIENT,
            (403, [], needs("credentials.admins or credentials.admin_tokens")),
        ),
        (
            "GET",
            "/eureka/overrides",
            AS_PEER,
            (403, [], needs("credentials.admins or credentials.admin_tokens")),
        ),
        ("GET", "/eureka/peerreplication/digest", NOBODY, (401, [BASIC], UNKNOWN)),
        ("GET", "/eureka/peerreplication/digest", AS_BEARER, (403, [], needs("credentials.peer"))),
        ("PUT", "/eureka/apps/ORDERS/i-1", REPLICATION, (401, [BASIC], UNKNOWN)),
        (
            "PUT",
            "/eureka/apps/ORDERS/i-1",
            {**AS_ADMIN, **REPLICATION},
            (403, [], needs("credentials.peer")),
        ),
    ],
)
async def test_a_refusal_says_what_the_call_needs(client, method, path, headers, answer):
    """A 401 challenges for what the plane takes (bearer tokens: the admin plane's only); a
    403 names the setting whose credentials the call needs."""
    response = await client.request(method, path, headers=_json(headers))
    challenges = response.headers.getall("WWW-Authenticate", [])
    assert answer == (response.status, challenges, await response.json())
    untouched(client)


async def test_the_admin_who_sets_an_override_is_remembered(client):
    path = "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=deploy"
    assert 200 == await call(client, "PUT", path, AS_ADMIN)
    response = await client.get("/eureka/overrides", headers=AS_BEARER)
    [listed] = (await response.json())["overrides"]
    assert ("ops", "deploy") == (listed["setBy"], listed["reason"])
    history = await (await client.get("/eureka/overrides/history", headers=AS_ADMIN)).json()
    assert ["ops"] == [entry["by"] for entry in history["history"]]
    assert 200 == await call(client, "DELETE", "/eureka/apps/ORDERS/i-1/status", AS_BEARER)
    history = await (await client.get("/eureka/overrides/history", headers=AS_ADMIN)).json()
    assert [("set", "ops"), ("deleted", "token")] == [
        (entry["action"], entry["by"]) for entry in history["history"]
    ]


async def test_a_clients_cancel_and_re_registration_leave_the_admins_override(client):
    """Only the admin plane (or the override's expiry) removes an admin's decision: a client
    cancelling its instance and registering it again finds the override still in force, and
    the override's history says who cancelled it."""
    path = "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=incident"
    assert 200 == await call(client, "PUT", path, AS_ADMIN)
    assert 200 == await call(client, "DELETE", "/eureka/apps/ORDERS/i-1", AS_CLIENT)
    assert 204 == await call(client, "POST", "/eureka/apps/ORDERS", AS_CLIENT)
    response = await client.get("/eureka/apps/ORDERS/i-1", headers=_json(AS_CLIENT))
    assert "OUT_OF_SERVICE" == (await response.json())["instance"]["status"]
    [listed] = (await (await client.get("/eureka/overrides", headers=AS_ADMIN)).json())["overrides"]
    assert ("OUT_OF_SERVICE", "incident", "ops") == (
        listed["status"],
        listed["reason"],
        listed["setBy"],
    )
    history = await (await client.get("/eureka/overrides/history", headers=AS_ADMIN)).json()
    assert [("set", "ops"), ("instance_cancelled", "svc")] == [
        (entry["action"], entry["by"]) for entry in history["history"]
    ]
    assert 200 == await call(client, "DELETE", "/eureka/apps/ORDERS/i-1/status", AS_ADMIN)
    assert {} == registry_of(client).overrides


async def test_no_credential_is_ever_logged(client):
    secrets = (CLIENT_PW, ADMIN_PW, PEER_PW, TOKEN, "guess")
    with capture_logs() as logs:
        admin = [(method, path) for method, path, _ in ADMIN_ENDPOINTS]
        for method, path in admin + PEER_ENDPOINTS + CLIENT_ENDPOINTS:
            for headers in (NOBODY, AS_CLIENT, AS_ADMIN, AS_PEER, *WRONG):
                await call(client, method, path, headers)
    assert not [event for event in logs if any(s in repr(event) for s in secrets)]
    assert not any(secret in repr(SECURED) for secret in secrets)


async def test_a_plane_with_no_credentials_of_its_own_is_closed(aiohttp_client, clock):
    """Credentials for clients only: the admin plane is not left open beside them."""
    from registry import create_app

    client = await aiohttp_client(
        create_app(Settings.of(credentials__clients=(f"svc:{CLIENT_PW}",)), clock=clock)
    )
    for path, setting in (
        ("/eureka/overrides", "credentials.admins or credentials.admin_tokens"),
        ("/eureka/peerreplication/digest", "credentials.peer"),
    ):
        closed = {"error": "forbidden", "detail": f"this node has no {setting} configured"}
        for headers in (AS_CLIENT, NOBODY, AS_BEARER):
            response = await client.get(path, headers=headers)
            assert (403, closed) == (response.status, await response.json()), headers


def test_a_credential_configured_for_two_planes_proves_both():
    both = Credentials(
        Settings.of(credentials__clients=("a:b",), credentials__admins=("a:b", "c:d"))
    )
    assert (Role.CLIENT | Role.ADMIN, "a") == both.check(basic("a", "b")["Authorization"])
    assert (Role.ADMIN, "c") == both.check(basic("c", "d")["Authorization"])
    assert (Role.NONE, None) == both.check(basic("a", "d")["Authorization"])
    assert (Role.NONE, None) == both.check("")


ENCODED = AS_CLIENT["Authorization"].split()[1]  # the client's credential in base64


def test_a_header_proves_its_roles_however_it_is_spaced_or_cased():
    credentials = Credentials(SECURED)
    for header in (f"  Basic {ENCODED} ", f"basic {ENCODED}", f"BASIC   {ENCODED}"):
        assert (Role.CLIENT, "svc") == credentials.check(header), header
    for header in (f"Bearer {TOKEN}", f" bearer   {TOKEN} ", f"BEARER {TOKEN}"):
        assert (Role.ADMIN, "token") == credentials.check(header), header


@pytest.mark.parametrize(
    "header",
    [
        f"Basic {ENCODED[:4]}*{ENCODED[4:]}",
        ENCODED,  # no scheme
        f"Digest {TOKEN}",
        f"Token {TOKEN}",
        "Bearer",
        "Bearer   ",
        f"Bearer {TOKEN}x",
        "",
    ],
    ids=["not-base64", "no-scheme", "digest", "token", "bearer", "bearer-blank", "other", "empty"],
)
def test_a_header_that_proves_nothing(header):
    """Only Basic with a known credential, in strict base64 (a character outside its alphabet
    is not skipped), or Bearer with a known token, proves a role."""
    assert (Role.NONE, None) == Credentials(SECURED).check(header)


@pytest.mark.parametrize(
    ("settings", "plane", "path"),
    [
        (  # admin passwords without tokens, with a peer credential listed after them
            Settings.of(
                credentials__clients=(f"svc:{CLIENT_PW}",),
                credentials__admins=(f"ops:{ADMIN_PW}",),
                credentials__peer=f"peer:{PEER_PW}",
            ),
            "admin",
            "/eureka/overrides",
        ),
        (  # tokens as the only admin credential
            Settings.of(
                credentials__clients=(f"svc:{CLIENT_PW}",), credentials__admin_tokens=(TOKEN,)
            ),
            "admin",
            "/eureka/overrides",
        ),
        (  # a peer credential beside client ones
            Settings.of(
                credentials__clients=(f"svc:{CLIENT_PW}",), credentials__peer=f"peer:{PEER_PW}"
            ),
            "peer",
            "/eureka/peerreplication/digest",
        ),
    ],
    ids=["admin-passwords", "admin-tokens", "peer"],
)
async def test_a_plane_with_credentials_of_its_own_challenges(
    aiohttp_client, clock, settings, plane, path
):
    """A plane is open to its credentials whichever other planes' are configured beside them:
    a call without one is challenged (401), not refused as if the plane had none (403)."""
    client = await aiohttp_client(create_app(settings, clock=clock))
    response = await client.get(path)
    assert (401, UNKNOWN) == (response.status, await response.json())
    passing = {
        "admin": AS_BEARER if settings.credentials.admin_tokens else AS_ADMIN,
        "peer": AS_PEER,
    }
    assert 200 == (await client.get(path, headers=passing[plane])).status


async def test_a_peer_signature_is_unknown_to_a_node_without_a_peer_credential(
    aiohttp_client, clock
):
    """The signature is checked with the peer credential's key: with none, it proves nothing."""
    settings = Settings.of(credentials__clients=(f"svc:{CLIENT_PW}",))
    client = await aiohttp_client(create_app(settings, clock=clock))
    host = f"{client.host}:{client.port}"
    authorization = sign(
        peer_key(f"peer:{PEER_PW}"),
        method="GET",
        host=host,
        target="/eureka/apps",
        body=b"",
        now_ms=clock.wall_ms(),
    )
    response = await client.get("/eureka/apps", headers={"Authorization": authorization})
    challenges = response.headers.getall("WWW-Authenticate", [])
    assert (401, [BASIC], UNKNOWN) == (response.status, challenges, await response.json())


def test_a_utf8_password_is_matched_byte_for_byte():
    credentials = Credentials(Settings.of(credentials__clients=("jürgen:pässword",)))
    header = "Basic " + base64.b64encode("jürgen:pässword".encode()).decode()
    assert (Role.CLIENT, "jürgen") == credentials.check(header)


def test_the_user_name_ends_at_the_first_colon():
    """As in HTTP Basic: the password may hold colons, the user name none."""
    credentials = Credentials(Settings.of(credentials__clients=("svc:a:b",)))
    assert (Role.CLIENT, "svc") == credentials.check(basic("svc", "a:b")["Authorization"])


async def test_a_client_cannot_set_an_override_through_a_registration(client):
    """Contract 6.2 takes an override from a registration: from a peer or an admin only."""
    for iid, headers in (
        ("i-2", AS_CLIENT),
        ("i-3", AS_ADMIN),
        ("i-4", {**AS_PEER, **REPLICATION}),
    ):
        doc = instance_doc("ORDERS", iid, overriddenStatus="OUT_OF_SERVICE")
        body = orjson.dumps({"instance": doc})
        response = await client.post("/eureka/apps/ORDERS", data=body, headers=_json(headers))
        assert 204 == response.status
    assert {"i-3", "i-4"} == set(registry_of(client).overrides)


async def test_a_peer_replicating_an_override_is_not_named_as_its_admin(client):
    path = "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE"
    assert 200 == await call(client, "PUT", path, {**AS_PEER, **REPLICATION})
    [listed] = (await (await client.get("/eureka/overrides", headers=AS_ADMIN)).json())["overrides"]
    assert None is listed["setBy"]


async def test_deleting_no_override_writes_no_history(client):
    assert 200 == await call(client, "DELETE", "/eureka/apps/ORDERS/i-1/status", AS_ADMIN)
    history = await (await client.get("/eureka/overrides/history", headers=AS_ADMIN)).json()
    assert [] == history["history"]


@pytest.mark.parametrize(
    "browser",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
    ],
)
async def test_a_browser_sending_for_another_site_changes_nothing(client, browser):
    """CSRF: the browser holds admin credentials for the status page; another site's page
    makes it send a change here. Eureka clients send neither header."""
    for method, path in [
        ("PUT", "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE"),
        ("POST", "/eureka/apps/ORDERS"),
        ("DELETE", "/eureka/apps/ORDERS/i-1"),
    ]:
        response = await client.request(
            method, path, data=BODY, headers={**_json(AS_ADMIN), **browser}
        )
        detail = "a browser sent this on behalf of another site's page"
        refused = {"error": "cross_site", "detail": detail}
        assert (403, refused) == (response.status, await response.json())
    untouched(client)
    for method in ("GET", "HEAD"):  # reads: a page of another site may embed them
        response = await client.request(method, "/eureka/apps", headers={**AS_ADMIN, **browser})
        assert 200 == response.status, method


async def test_the_status_pages_own_calls_pass(client):
    origin = f"http://{client.server.host}:{client.server.port}"
    path = "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE"
    for browser in (
        {"Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "none"},  # typed in by the user
        {"Sec-Fetch-Site": "same-origin", "Origin": "http://evil.example"},  # the first says
        {"Origin": origin},
    ):
        assert 200 == (await client.put(path, headers={**AS_ADMIN, **browser})).status


class TestCredentialsBoundToApplications:
    """`credentials.client_applications`: a client credential bound to applications registers,
    renews and cancels their instances only; an unbound one, any application's (as before)."""

    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(
            credentials__clients=("orders:o-pw", "billing:b-pw"),
            credentials__admins=(f"ops:{ADMIN_PW}",),
            credentials__client_applications=("orders=ORDERS|ORDERS-WORKER",),
            credentials__client_vip_addresses=("orders=orders.internal",),
        )

    @pytest.fixture
    async def client(self, aiohttp_client, settings, clock) -> TestClient:
        return await aiohttp_client(create_app(settings, clock=clock))

    async def call(self, client, method: str, path: str, who: dict[str, str]) -> int:
        body = None
        if method == "POST":
            app = path.rsplit("/", 1)[1]
            body = orjson.dumps({"instance": instance_doc(app, f"{app.lower()}-1")})
        headers = {**who, "Content-Type": "application/json"}
        response = await client.request(method, f"/eureka/{path}", data=body, headers=headers)
        return response.status

    async def test_a_bound_credential_acts_on_its_applications_only(self, client):
        orders, billing = basic("orders", "o-pw"), basic("billing", "b-pw")
        assert 204 == await self.call(client, "POST", "apps/ORDERS", orders)
        assert 204 == await self.call(client, "POST", "apps/orders-worker", orders)
        assert 204 == await self.call(client, "POST", "apps/BILLING", billing)
        assert 403 == await self.call(client, "POST", "apps/BILLING", orders)
        assert 403 == await self.call(client, "PUT", "apps/BILLING/billing-1", orders)
        response = await client.delete("/eureka/apps/BILLING/billing-1", headers=orders)
        detail = (
            "the client credential 'orders' acts on instances of ORDERS, ORDERS-WORKER only, "
            "not of BILLING (credentials.client_applications)"
        )
        assert (403, {"error": "forbidden", "detail": detail}) == (
            response.status,
            await response.json(),
        )
        assert 403 == await self.call(client, "DELETE", "apps/BILLING/billing-1", orders)
        assert 200 == await self.call(client, "PUT", "apps/ORDERS/orders-1", orders)
        # Unbound: any application, as docs/operations.md says plainly; an admin: any too.
        assert 200 == await self.call(client, "PUT", "apps/ORDERS/orders-1", billing)
        assert 200 == await self.call(
            client, "PUT", "apps/BILLING/billing-1", basic("ops", ADMIN_PW)
        )
        assert 200 == await self.call(client, "GET", "apps/BILLING", orders)  # reads: not bound
        assert {"orders-1", "orders-worker-1", "billing-1"} == {
            lease.instance.instance_id for lease in registry_of(client).leases()
        }

    async def register(self, client, app: str, who: dict[str, str], **fields: str) -> int:
        doc = instance_doc(app, f"{app.lower()}-1", **fields)
        response = await client.post(
            f"/eureka/apps/{app}",
            data=orjson.dumps({"instance": doc}),
            headers={**who, "Content-Type": "application/json"},
        )
        if response.status == 403:
            assert "vipaddress: the client credential" in (await response.json())["detail"].lower()
        return response.status

    @pytest.mark.parametrize(
        "fields",
        [
            {"vipAddress": "billing"},
            {"secureVipAddress": "billing"},
            {"vipAddress": "orders,billing"},  # VIP reads split on commas
            {"vipAddress": "orders", "secureVipAddress": "BILLING"},
            {"vipAddress": "orders-api"},  # not listed for this credential
        ],
    )
    async def test_a_bound_credential_gives_no_vip_address_it_does_not_own(self, client, fields):
        """Callers resolve a service by its VIP address: one given by another credential's
        instance would draw that service's traffic. Refused, and nothing registered."""
        assert 403 == await self.register(client, "ORDERS", basic("orders", "o-pw"), **fields)
        assert [] == list(registry_of(client).leases())
        reader = {**basic("billing", "b-pw"), "Accept": "application/json"}
        vips = await client.get("/eureka/vips/billing", headers=reader)
        assert [] == (await vips.json())["applications"]["application"]

    @pytest.mark.parametrize(
        ("fields", "field", "name"),
        [
            ({"vipAddress": "orders,Billing"}, "vipAddress", "Billing"),
            (
                {"vipAddress": "orders", "secureVipAddress": "billing"},
                "secureVipAddress",
                "billing",
            ),
        ],
    )
    async def test_a_refused_vip_address_is_named(self, client, fields, field, name):
        """The refusal names the field, the names the credential gives, and the one refused
        as it was sent."""
        response = await client.post(
            "/eureka/apps/ORDERS",
            data=orjson.dumps({"instance": instance_doc("ORDERS", "orders-1", **fields)}),
            headers={**basic("orders", "o-pw"), "Content-Type": "application/json"},
        )
        detail = (
            f"{field}: the client credential 'orders' gives ORDERS, ORDERS-WORKER, "
            f"ORDERS.INTERNAL only, not {name!r} "
            "(credentials.client_applications, credentials.client_vip_addresses)"
        )
        assert (403, {"error": "forbidden", "detail": detail}) == (
            response.status,
            await response.json(),
        )

    async def test_a_bound_credential_gives_its_own_names_and_those_listed(self, client):
        orders = basic("orders", "o-pw")
        for fields in (
            {"vipAddress": "orders", "secureVipAddress": "ORDERS"},
            {"vipAddress": "orders-worker,Orders"},
            {"vipAddress": "orders,,orders-worker,"},  # empty names give nothing
            {"vipAddress": "orders", "secureVipAddress": ...},  # none given
            {"vipAddress": "orders.internal", "secureVipAddress": "orders.internal"},
        ):
            assert 204 == await self.register(client, "ORDERS", orders, **fields)
        # Unbound and admin credentials give any name, as they may register any application.
        assert 204 == await self.register(
            client, "BILLING", basic("billing", "b-pw"), vipAddress="orders"
        )
        assert 204 == await self.register(
            client, "PAY", basic("ops", ADMIN_PW), vipAddress="billing"
        )

    async def test_a_credential_bound_without_listed_names_gives_its_applications(
        self, aiohttp_client, clock
    ):
        """credentials.client_vip_addresses need not list a bound credential: it gives its
        applications' names alone."""
        settings = Settings.of(
            credentials__clients=("orders:o-pw",),
            credentials__client_applications=("orders=ORDERS",),
        )
        client = await aiohttp_client(create_app(settings, clock=clock))
        orders = basic("orders", "o-pw")
        assert 204 == await self.register(client, "ORDERS", orders, vipAddress="orders")
        assert 403 == await self.register(client, "ORDERS", orders, vipAddress="orders.internal")

    @pytest.mark.parametrize(
        ("entry", "says"),
        [("nobody=ORDERS", "is the user of no client credential"), ("orders=", "not user=APP")],
    )
    def test_a_binding_must_name_a_client_user_and_applications(self, entry, says):
        with pytest.raises(SettingsError, match=says):
            Settings.of(
                credentials__clients=("orders:pw",), credentials__client_applications=(entry,)
            )

    def test_vip_addresses_are_listed_for_bound_credentials_only(self):
        with pytest.raises(SettingsError, match="is bound to no application"):
            Settings.of(
                credentials__clients=("orders:pw", "billing:pw"),
                credentials__client_applications=("orders=ORDERS",),
                credentials__client_vip_addresses=("billing=billing-api",),
            )


async def test_a_registration_older_than_ours_says_it_was_ignored(client):
    """Still 204 (stock clients need it), with a header saying ours was kept."""
    doc = instance_doc("ORDERS", "i-9", lastDirtyTimestamp="1735689005000")
    headers = {"Content-Type": "application/json", **AS_CLIENT}
    first = await client.post(
        "/eureka/apps/ORDERS", data=orjson.dumps({"instance": doc}), headers=headers
    )
    assert "X-Registry-Registration" not in first.headers
    older = {**doc, "lastDirtyTimestamp": "1735689000000"}
    response = await client.post(
        "/eureka/apps/ORDERS", data=orjson.dumps({"instance": older}), headers=headers
    )
    assert 204 == response.status
    assert response.headers["X-Registry-Registration"].startswith("ignored: this registry holds")


class TestInstancesPerCredential:
    """limits.max_instances_per_credential: one client user's new instances at most; registering
    again is not counted twice, and an instance that goes frees its place."""

    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(
            credentials__clients=("orders:o-pw", "billing:b-pw"),
            credentials__admins=(f"ops:{ADMIN_PW}",),
            limits__max_instances_per_credential=2,
        )

    @pytest.fixture
    async def client(self, aiohttp_client, settings, clock) -> TestClient:
        return await aiohttp_client(create_app(settings, clock=clock))

    async def register(self, client, iid: str, who: dict[str, str]) -> int:
        body = orjson.dumps({"instance": instance_doc("ORDERS", iid)})
        response = await client.post("/eureka/apps/ORDERS", data=body, headers=_json(who))
        return response.status

    async def test_a_credential_holds_its_quota_and_no_more(self, client):
        orders = basic("orders", "o-pw")
        assert [204, 204, 204] == [await self.register(client, i, orders) for i in ("a", "b", "a")]
        assert 403 == await self.register(client, "c", orders)
        assert 204 == await self.register(client, "c", basic("billing", "b-pw"))  # its own
        assert 204 == await self.register(client, "d", basic("ops", ADMIN_PW))  # admins: no cap
        assert 200 == (await client.delete("/eureka/apps/ORDERS/a", headers=orders)).status
        assert 204 == await self.register(client, "e", orders)  # a's place, freed
