"""Who may call what: three planes, each with credentials of its own (settings).

- client: register, heartbeat, cancel, every fetch, the watch stream, `/metrics` and the status
  page. Client, admin and peer credentials all pass: peers copy the registry, admins read it.
- admin: status overrides (set, delete, the listings, history and explain) and metadata. Admin
  credentials only, as HTTP Basic or a bearer token.
- peer: the batch and digest endpoints, and any request that says it is a replication (the
  `x-netflix-discovery-replication` header), whatever its path. The peer credential only:
  our nodes sign each request with it (`Authorization: Registry-Peer ...`,
  registry/http/peer_signatures.py), stock Eureka servers send it as HTTP Basic.

Health, readiness and the OpenAPI document are open: probes carry no credentials. Each route
declares its plane in the route table (routes.py).

With no credentials configured no guard is installed, and the settings keep the server on
loopback. Otherwise a request without a credential this node knows gets 401 and a challenge; one
with a known credential of another plane gets 403 (registry/http/credentials.py checks them). A
SIGHUP that changes the credentials applies them to the next request; one that would turn them
on or off entirely is refused (see `registry.app._reload`).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from urllib.parse import urlsplit

from aiohttp import hdrs, web

from registry.appkeys import CREDENTIALS, SETTINGS
from registry.core.model import InstanceInfo
from registry.errors import Forbidden, Unauthorized, shown
from registry.http.answering import Check
from registry.http.credentials import Credentials, Role
from registry.http.params import is_replication
from registry.http.peer_signatures import PeerSignatures
from registry.settings import Settings, is_loopback

REALM = "service-registry"


class Plane(enum.Enum):
    """Where a route belongs; its value is the roles that pass."""

    OPEN = Role.NONE
    CLIENT = Role.CLIENT | Role.ADMIN | Role.PEER
    ADMIN = Role.ADMIN
    PEER = Role.PEER


PRINCIPAL = web.RequestKey("principal", str)  # the user name the credential carried
ROLES = web.RequestKey("roles", Role)  # every role the credential proved

# The setting a refused call's plane takes its credentials from. The client plane takes every
# role, so a guard (installed only where some credential is configured) never refuses its call
# with a 403: it has no entry.
_SETTING = {
    Plane.ADMIN: "credentials.admins or credentials.admin_tokens",
    Plane.PEER: "credentials.peer",
}


def from_this_site(settings: Settings) -> Check:
    """The check that refuses what a browser sends on another site's behalf.

    A page of another site can make a browser POST, PUT or DELETE here, with the Basic
    credentials the browser holds for the status page (CSRF); the browser says so in
    `Sec-Fetch-Site`, or in older browsers with an `Origin` naming another host. Eureka clients
    send neither. And while no credentials are configured, a name of another site that resolves
    to this loopback address (DNS rebinding) would reach every plane: then only loopback Host
    names are answered.
    """
    loopback_only = not settings.secured and not settings.server.insecure_public_bind

    def check(request: web.Request) -> None:
        if request.method not in ("GET", "HEAD") and _cross_site(request):
            raise Forbidden(
                "a browser sent this on behalf of another site's page", reason="cross_site"
            )
        if loopback_only and not _loopback_host(request.host):
            raise Forbidden(
                "with no credentials configured this node answers loopback names only "
                f"(127.0.0.1, localhost), not {request.host!r}",
                reason="not_loopback",
            )

    return check


def _cross_site(request: web.Request) -> bool:
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site not in ("same-origin", "none")  # "none": typed by the user
    origin = request.headers.get(hdrs.ORIGIN)
    return origin is not None and urlsplit(origin).netloc != request.host


def _names_loopback(host: str) -> bool:
    """Whether a Host header names this machine's loopback (its port, if any, aside)."""
    if host.startswith("["):
        host = host[1:].partition("]")[0]  # [::1]:8761
    elif host.count(":") == 1:
        host = host.rpartition(":")[0]
    return is_loopback(host)


# Clients send the same few Host values again and again. Cached here rather than decorated
# where it is defined, so that mutation testing (which leaves decorated functions alone)
# reaches the rule.
_loopback_host = functools.lru_cache(maxsize=256)(_names_loopback)


def may_administer(request: web.Request) -> bool:
    """Whether this request could call the admin plane: always, when no credentials are
    configured (then the server is on loopback, unless `server.insecure_public_bind` says
    otherwise). Where they are, the plane's guard has set the request's roles before its handler
    runs."""
    return not request.app[SETTINGS].secured or bool(request[ROLES] & Role.ADMIN)


def may_act_on(request: web.Request, app: str) -> None:
    """Refuse (403) a client credential bound to other applications than `app`
    (`credentials.client_applications`): it may register, renew and cancel its own
    applications' instances only. Admins and peers act on any; an unbound client credential, on
    any as well."""
    apps = _bound(request, lambda credentials: credentials.applications)
    if apps is not None and app not in apps:
        raise Forbidden(
            f"the client credential {client_user(request)!r} acts on instances of "
            f"{', '.join(sorted(apps))} only, not of {app} (credentials.client_applications)"
        )


def may_give_vips(request: web.Request, instance: InstanceInfo) -> None:
    """Refuse (403) an instance whose VIP or secure VIP address names what its bound client
    credential does not own: callers resolve a service by its VIP address (Spring Cloud's load
    balancer does), so a name given here would draw another service's traffic. A bound
    credential owns its applications' names, in any case, and those
    `credentials.client_vip_addresses` lists for it; an unbound one, admins and peers give any."""
    names = _bound(request, lambda credentials: credentials.vip_addresses)
    if names is None:
        return
    for field, addresses in (
        ("vipAddress", instance.vip_address),
        ("secureVipAddress", instance.secure_vip_address),
    ):
        # Split as the VIP reads split them (reads/payloads.py): on commas, nothing trimmed.
        for name in (addresses or "").split(","):
            if name and name.upper() not in names:
                raise Forbidden(
                    f"{field}: the client credential {client_user(request)!r} gives "
                    f"{', '.join(sorted(names))} only, not {shown(name)} "
                    "(credentials.client_applications, credentials.client_vip_addresses)"
                )


def _bound(
    request: web.Request, names: Callable[[Credentials], dict[str, frozenset[str]]]
) -> frozenset[str] | None:
    """The names this request's client credential is bound to, by `names`; None when unbound
    (an admin's or a peer's, a client credential not listed, or no credentials at all)."""
    credentials = request.app[CREDENTIALS]
    if credentials is None or not credentials.applications:
        return None
    user = client_user(request)
    return names(credentials).get(user) if user is not None else None


def client_user(request: web.Request) -> str | None:
    """The user of the client credential this request came with; None for an admin's or a
    peer's, or when no credentials are configured."""
    if request.get(ROLES, Role.NONE) & (Role.ADMIN | Role.PEER):
        return None
    return request.get(PRINCIPAL)


def principal(request: web.Request) -> str | None:
    """Who made this request, by the user name of its credential (`token` for a bearer)."""
    return request.get(PRINCIPAL)


def guard(on: Plane, credentials: Credentials, signatures: PeerSignatures) -> Check | None:
    """The check that lets through only a request whose credential belongs on plane `on`
    (None for the open plane: nothing to check)."""
    if on is Plane.OPEN:
        return None

    def check(request: web.Request) -> None:
        needed = on
        if is_replication(request):
            needed = Plane.PEER  # only a peer may have its call applied as a replication
        authorization = request.headers.get(hdrs.AUTHORIZATION, "")
        scheme, _, value = authorization.strip().partition(" ")
        user: str | None
        if scheme.lower() == "registry-peer" and credentials.peer_key is not None:
            signatures.check(request, credentials.peer_key, value)  # raises if it does not hold
            roles, user = Role.PEER, credentials.peer_user
        else:
            roles, user = credentials.check(authorization)
        if roles & needed.value and user is not None:  # a user name comes with any role
            request[ROLES], request[PRINCIPAL] = roles, user
            return
        if not credentials.configured & needed.value:
            raise Forbidden(f"this node has no {_SETTING[needed]} configured")
        if roles:
            raise Forbidden(f"this credential may not call this; it needs {_SETTING[needed]}")
        challenges = [f'Basic realm="{REALM}", charset="UTF-8"']
        if needed is Plane.ADMIN:
            challenges.append(f'Bearer realm="{REALM}"')
        raise Unauthorized("credentials missing or not recognised", challenges=challenges)

    return check
