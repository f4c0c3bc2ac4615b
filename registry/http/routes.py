"""The route table: every route's handler, plane, rate limit and documentation, in one place.

Served under `/eureka/` and `/eureka/v2/` (and `/eureka/v1/`, harmlessly), each path with and
without a trailing slash, as JAX-RS clients expect (contract 1). Auth (the plane's guard),
throttling and `/openapi.json` all read it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler

from registry.appkeys import CLOCK, CREDENTIALS, LIMITER, REGISTRY, REQUESTS, SETTINGS
from registry.http import (
    admin_api,
    api_docs,
    check_api,
    discovery_api,
    instance_api,
    metrics_api,
    openapi,
    peer_api,
    server_info,
    status_page,
    watch_api,
)
from registry.http.answering import Check, answering
from registry.http.auth import Plane, from_this_site, guard
from registry.http.error_handling import method_not_allowed, no_such_endpoint
from registry.http.peer_signatures import PeerSignatures
from registry.http.route import Route
from registry.http.throttle import limited

PREFIXES = ("/eureka", "/eureka/v2", "/eureka/v1")


def _heartbeat(app: web.Application) -> Handler:
    skew_ms = int(app[SETTINGS].leases.max_clock_skew * 1000)
    return instance_api.heartbeat_handler(app[REGISTRY], app[CLOCK], skew_ms, app[CREDENTIALS])


def _openapi(app: web.Application) -> Handler:
    return openapi.serving(VERSIONED, UNVERSIONED)


_C, _A, _P, _O = Plane.CLIENT, Plane.ADMIN, Plane.PEER, Plane.OPEN

# Paths under each prefix -> {method: route}. aiohttp tries the resources under one prefix in
# this order, so the heartbeat's path comes first; `apps/delta` comes before `apps/{app}` so it
# wins for GET (case-sensitively, as in JAX-RS). App names are upper-cased by the handlers.
VERSIONED: dict[str, dict[str, Route]] = {
    "/apps/{app}/{id}": {
        "PUT": Route(plane=_C, doc=api_docs.HEARTBEAT, build=_heartbeat),
        "DELETE": Route(plane=_C, doc=api_docs.CANCEL, handler=instance_api.cancel),
        "GET": Route(plane=_C, doc=api_docs.INSTANCE, handler=discovery_api.instance),
    },
    "/apps": {
        "GET": Route(plane=_C, doc=api_docs.FULL, handler=discovery_api.full_registry, limited=True)
    },
    # An application may be called DELTA: its registrations still reach register.
    "/apps/{app:delta}": {
        "GET": Route(plane=_C, doc=api_docs.DELTA, handler=discovery_api.delta, limited=True),
        "POST": Route(plane=_C, doc=api_docs.REGISTER_DELTA, handler=instance_api.register),
    },
    "/apps/{app}": {
        "POST": Route(plane=_C, doc=api_docs.REGISTER, handler=instance_api.register),
        "GET": Route(
            plane=_C, doc=api_docs.APPLICATION, handler=discovery_api.application, limited=True
        ),
    },
    "/apps/{app}/{id}/status": {
        "PUT": Route(plane=_A, doc=api_docs.SET_OVERRIDE, handler=admin_api.set_status_override),
        "DELETE": Route(
            plane=_A, doc=api_docs.DELETE_OVERRIDE, handler=admin_api.delete_status_override
        ),
    },
    "/apps/{app}/{id}/status/explain": {
        "GET": Route(plane=_A, doc=api_docs.EXPLAIN, handler=admin_api.explain)
    },
    "/apps/{app}/{id}/metadata": {
        "PUT": Route(plane=_A, doc=api_docs.METADATA, handler=admin_api.update_metadata)
    },
    "/instances/{id}": {
        "GET": Route(
            plane=_C,
            doc=api_docs.INSTANCE_BY_ID,
            handler=discovery_api.instance_by_id,
            limited=True,  # it looks in every application
        )
    },
    "/vips/{vip}": {
        "GET": Route(plane=_C, doc=api_docs.VIPS, handler=discovery_api.vip, limited=True)
    },
    "/svips/{vip}": {
        "GET": Route(
            plane=_C, doc=api_docs.SECURE_VIPS, handler=discovery_api.secure_vip, limited=True
        )
    },
    "/status": {"GET": Route(plane=_C, doc=api_docs.STATUS, handler=server_info.status)},
    "/overrides": {"GET": Route(plane=_A, doc=api_docs.OVERRIDES, handler=admin_api.overrides)},
    "/overrides/history": {
        "GET": Route(plane=_A, doc=api_docs.OVERRIDE_HISTORY, handler=admin_api.override_history)
    },
    "/checks": {"GET": Route(plane=_A, doc=api_docs.APP_CHECKS, handler=check_api.checks)},
    "/checks/{app}": {
        "GET": Route(plane=_A, doc=api_docs.APP_CHECK, handler=check_api.app_check),
        "PUT": Route(plane=_A, doc=api_docs.SET_APP_CHECK, handler=check_api.set_app_check),
        "DELETE": Route(
            plane=_A, doc=api_docs.REMOVE_APP_CHECK, handler=check_api.remove_app_check
        ),
    },
    "/watch": {"GET": Route(plane=_C, doc=api_docs.WATCH, handler=watch_api.watch)},
    "/peerreplication/batch": {
        "POST": Route(plane=_P, doc=api_docs.PEER_BATCH, handler=peer_api.batch)
    },
    "/peerreplication/digest": {
        "GET": Route(plane=_P, doc=api_docs.PEER_DIGEST, handler=peer_api.digests)
    },
    "/peerreplication/removed": {
        "GET": Route(plane=_P, doc=api_docs.PEER_REMOVED, handler=peer_api.removed)
    },
}

# Outside the versioned API: Netflix serves the override dump there; probes, documents, pages.
UNVERSIONED: dict[str, dict[str, Route]] = {
    "/eureka/serverinfo/statusoverrides": {
        "GET": Route(plane=_A, doc=api_docs.STATUS_OVERRIDES, handler=admin_api.status_overrides)
    },
    "/healthz": {"GET": Route(plane=_O, doc=api_docs.HEALTHZ, handler=server_info.healthz)},
    "/readyz": {"GET": Route(plane=_O, doc=api_docs.READYZ, handler=server_info.readyz)},
    "/openapi.json": {"GET": Route(plane=_O, doc=api_docs.OPENAPI, build=_openapi)},
    "/metrics": {"GET": Route(plane=_C, doc=api_docs.METRICS, handler=metrics_api.metrics)},
    "/": {"GET": Route(plane=_C, doc=api_docs.PAGE, handler=status_page.page, limited=True)},
    "/page/{name}": {"GET": Route(plane=_C, doc=api_docs.PAGE_ASSET, handler=status_page.asset)},
}


def add_routes(app: web.Application) -> None:
    settings = app[SETTINGS]
    credentials = app[CREDENTIALS]
    # One for every route: a nonce seen on one path is a replay on any other
    signatures = PeerSignatures(
        app[CLOCK], window=settings.leases.max_clock_skew, my_url=settings.peers.my_url
    )

    def wrap(route: Route, endpoint: str, method: str) -> Handler:
        """`route`'s handler for `method` behind its checks, in order: the browser checks, the
        plane's guard, the fetch rate limit; errors answered as JSON (the checks' refusals
        too), and the request counted under `endpoint`."""
        checks: list[Check] = [from_this_site(settings)]
        if credentials is not None and (checked := guard(route.plane, credentials, signatures)):
            checks.append(checked)  # no credentials, no guard: it costs nothing
        limiter = app[LIMITER]
        if limiter is not None and route.limited and method in ("GET", "HEAD"):
            checks.append(limited(limiter, app[CLOCK]))
        return answering(route.made(app), checks, app[REGISTRY], app[REQUESTS], endpoint, method)

    for prefix in PREFIXES:
        for path, methods in VERSIONED.items():
            # aiohttp's default segment pattern refuses braces; ids may contain them.
            pattern = prefix + re.sub(r"\{(\w+)\}", r"{\1:[^/]+}", path)
            _add(app, pattern, methods, wrap, "/eureka" + path)
    for path, methods in UNVERSIONED.items():
        _add(app, path, methods, wrap, path)
    # Counted too, so probing shows in /metrics: endpoint "none", and method "*" on a 405.
    unmatched = answering(no_such_endpoint, (), app[REGISTRY], app[REQUESTS], "none", "*")
    app.router.add_route("*", "/{tail:.*}", unmatched)


Wrap = Callable[[Route, str, str], Handler]


def _add(
    app: web.Application, pattern: str, methods: dict[str, Route], wrap: Wrap, endpoint: str
) -> None:
    """The resource at `pattern`, with and without a trailing slash: its handlers (GET answering
    HEAD too) and a JSON 405 for other methods."""
    if "GET" in methods:
        methods = {**methods, "HEAD": methods["GET"]}
    refused = answering(
        method_not_allowed(list(methods)), (), app[REGISTRY], app[REQUESTS], endpoint, "*"
    )
    for variant in dict.fromkeys((pattern, pattern.rstrip("/") + "/")):  # "/" only once
        resource = app.router.add_resource(variant)
        for method, route in methods.items():
            resource.add_route(method, wrap(route, endpoint, method))
        resource.add_route("*", refused)
