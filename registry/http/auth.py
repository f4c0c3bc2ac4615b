"""Who may call what: three planes, each with credentials of its own (settings).

- client: register, heartbeat, cancel, every fetch, the watch stream, `/metrics` and the status
  page. Client, admin and peer credentials all pass: peers copy the registry, admins read it.
- admin: status overrides (set, delete, the listings, history and explain) and metadata. Admin
  credentials only, as HTTP Basic or a bearer token.
- peer: the batch and digest endpoints, and any request that says it is a replication (the
  `x-netflix-discovery-replication` header), whatever its path. The peer credential only.

Health, readiness and the OpenAPI document are open: probes carry no credentials.

With no credentials configured no guard is installed, and the settings keep the server on
loopback. Otherwise a request without a credential this node knows gets 401 and a challenge; one
with a known credential of another plane gets 403. A presented credential is hashed and compared
with every configured one in constant time, so the timing shows neither which one matched nor
how long any is; credentials are never logged.
"""

from __future__ import annotations

import base64
import binascii
import enum
import functools
import hashlib
import hmac

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from registry.appkeys import SETTINGS
from registry.codec.wire import REPLICATION_HEADER
from registry.http.error_handling import error_response
from registry.settings import Settings

REALM = "service-registry"


class Role(enum.Flag):
    NONE = 0
    CLIENT = enum.auto()
    ADMIN = enum.auto()
    PEER = enum.auto()


class Plane(enum.Enum):
    OPEN = Role.NONE
    CLIENT = Role.CLIENT | Role.ADMIN | Role.PEER
    ADMIN = Role.ADMIN
    PEER = Role.PEER


PRINCIPAL = web.RequestKey("principal", str)  # the user name the credential carried
ROLES = web.RequestKey("roles", Role)  # every role the credential proved

_SETTING = {
    Plane.CLIENT: "client_credentials",
    Plane.ADMIN: "admin_credentials or admin_tokens",
    Plane.PEER: "peer_credential",
}


# Each path's plane (paths as the route table names them, under the version prefix); any other
# path is the client's.
ADMIN_PATHS = frozenset(
    {
        "/apps/{app}/{id}/status",
        "/apps/{app}/{id}/status/explain",
        "/apps/{app}/{id}/metadata",
        "/overrides",
        "/overrides/history",
        "/eureka/serverinfo/statusoverrides",
    }
)
PEER_PATHS = frozenset({"/peerreplication/batch", "/peerreplication/digest"})
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json"})


def plane(path: str) -> Plane:
    if path in ADMIN_PATHS:
        return Plane.ADMIN
    if path in PEER_PATHS:
        return Plane.PEER
    return Plane.OPEN if path in OPEN_PATHS else Plane.CLIENT


def _digest(secret: bytes) -> bytes:
    return hashlib.sha256(secret).digest()


class Credentials:
    """The configured credentials, kept only as digests, and what a request's header proves."""

    def __init__(self, settings: Settings) -> None:
        basic = [(c, Role.CLIENT) for c in settings.client_credentials]
        basic += [(c, Role.ADMIN) for c in settings.admin_credentials]
        if settings.peer_credential:
            basic.append((settings.peer_credential, Role.PEER))
        self._basic = [(_digest(c.encode()), role) for c, role in basic]
        self._tokens = [(_digest(t.encode()), Role.ADMIN) for t in settings.admin_tokens]
        self.configured = Role.NONE
        for _, role in self._basic:
            self.configured |= role
        if self._tokens:
            self.configured |= Role.ADMIN

    def check(self, authorization: str | None) -> tuple[Role, str | None]:
        """The roles the `Authorization` header proves, and the user name it carries."""
        scheme, _, value = (authorization or "").strip().partition(" ")
        scheme = scheme.lower()
        if scheme == "basic":
            try:
                presented = base64.b64decode(value.strip(), validate=True)
            except (binascii.Error, ValueError):
                return Role.NONE, None
            roles = _matching(_digest(presented), self._basic)
            user = presented.partition(b":")[0].decode("utf-8", "replace") if roles else None
            return roles, user
        if scheme == "bearer" and value.strip():
            roles = _matching(_digest(value.strip().encode()), self._tokens)
            return roles, ("token" if roles else None)
        return Role.NONE, None


def _matching(digest: bytes, known: list[tuple[bytes, Role]]) -> Role:
    """Every match, each compared in constant time, without stopping at the first."""
    roles = Role.NONE
    for candidate, role in known:
        if hmac.compare_digest(candidate, digest):
            roles |= role
    return roles


def may_administer(request: web.Request) -> bool:
    """Whether this request could call the admin plane: always, when no credentials are
    configured (the server is then on loopback only)."""
    return not request.app[SETTINGS].secured or bool(request.get(ROLES, Role.NONE) & Role.ADMIN)


def principal(request: web.Request) -> str | None:
    """Who made this request, by the user name of its credential (`token` for a bearer)."""
    return request.get(PRINCIPAL)


def guard(handler: Handler, plane: Plane, credentials: Credentials) -> Handler:
    """`handler`, answered only for a request whose credential belongs on `plane`."""
    if plane is Plane.OPEN:
        return handler

    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        needed = plane
        if request.headers.get(REPLICATION_HEADER) == "true":
            needed = Plane.PEER  # only a peer may have its call applied as a replication
        roles, user = credentials.check(request.headers.get(hdrs.AUTHORIZATION))
        if roles & needed.value:
            request[ROLES] = roles
            if user is not None:
                request[PRINCIPAL] = user
            return await handler(request)
        if not credentials.configured & needed.value:
            return error_response(
                403, "forbidden", f"this node has no {_SETTING[needed]} configured"
            )
        if roles:
            return error_response(
                403, "forbidden", f"this credential may not call this; it needs {_SETTING[needed]}"
            )
        response = error_response(401, "unauthorized", "credentials missing or not recognised")
        response.headers[hdrs.WWW_AUTHENTICATE] = f'Basic realm="{REALM}", charset="UTF-8"'
        if needed is Plane.ADMIN:
            response.headers.add(hdrs.WWW_AUTHENTICATE, f'Bearer realm="{REALM}"')
        return response

    return wrapper
