"""The route table, served under `/eureka/` and `/eureka/v2/` (and `/eureka/v1/`, harmlessly),
each path with and without a trailing slash, as JAX-RS clients expect (contract 1)."""

from __future__ import annotations

import re
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler

from registry import metrics
from registry.appkeys import CLOCK, LIMITER, REGISTRY, REQUESTS, SETTINGS
from registry.http import (
    admin_api,
    client_api,
    discovery_api,
    openapi,
    peer_api,
    server_info,
    status_page,
    watch_api,
)
from registry.http.auth import Credentials, from_this_site, guard, plane
from registry.http.error_handling import json_errors, method_not_allowed, no_such_endpoint
from registry.http.throttle import limited
from registry.request_stats import timed

PREFIXES = ("/eureka", "/eureka/v2", "/eureka/v1")


def routes(app: web.Application) -> dict[str, dict[str, Handler]]:
    """Path under the prefix -> {method: handler}.

    aiohttp tries the resources under one prefix in this order, so the heartbeat's path comes
    first; `apps/delta` comes before `apps/{app}` so it wins for GET (case-sensitively, as in
    JAX-RS). App names are upper-cased by the handlers.
    """
    return {
        "/apps/{app}/{id}": {
            "PUT": client_api.heartbeat_handler(app[REGISTRY], app[CLOCK]),
            "DELETE": client_api.cancel,
            "GET": discovery_api.instance,
        },
        "/apps": {"GET": discovery_api.full_registry},
        # An application may be called DELTA: its registrations still reach register.
        "/apps/{app:delta}": {"GET": discovery_api.delta, "POST": client_api.register},
        "/apps/{app}": {"POST": client_api.register, "GET": discovery_api.application},
        "/apps/{app}/{id}/status": {
            "PUT": admin_api.set_status_override,
            "DELETE": admin_api.delete_status_override,
        },
        "/apps/{app}/{id}/status/explain": {"GET": admin_api.explain},
        "/apps/{app}/{id}/metadata": {"PUT": admin_api.update_metadata},
        "/instances/{id}": {"GET": discovery_api.instance_by_id},
        "/vips/{vip}": {"GET": discovery_api.vip},
        "/svips/{vip}": {"GET": discovery_api.secure_vip},
        "/status": {"GET": server_info.status},
        "/overrides": {"GET": admin_api.overrides},
        "/overrides/history": {"GET": admin_api.override_history},
        "/watch": {"GET": watch_api.watch},
        "/peerreplication/batch": {"POST": peer_api.batch},
        "/peerreplication/digest": {"GET": peer_api.digests},
    }


# Netflix serves the override dump outside the versioned API.
UNVERSIONED: dict[str, dict[str, Handler]] = {
    "/eureka/serverinfo/statusoverrides": {"GET": admin_api.status_overrides},
    "/healthz": {"GET": server_info.healthz},
    "/readyz": {"GET": server_info.readyz},
    "/openapi.json": {"GET": openapi.openapi},
    "/metrics": {"GET": metrics.metrics},
    "/": {"GET": status_page.page},
    "/page/{name}": {"GET": status_page.asset},
}


# Registry fetches: rate-limited per client when `fetch_rate_limit` is set (GET and HEAD).
FETCHES = frozenset({"/apps", "/apps/{app:delta}", "/apps/{app}", "/vips/{vip}", "/svips/{vip}"})


def add_routes(app: web.Application) -> None:
    settings = app[SETTINGS]
    credentials = Credentials(settings) if settings.secured else None

    def wrap(handler: Handler, method: str, path: str, endpoint: str) -> Handler:
        """`handler` for `method` on `path` (as the tables name it), wrapped innermost first in:
        errors as JSON, the fetch rate limit, the plane's guard, the browser checks, and the
        request metrics (counted under `endpoint`)."""
        answered = json_errors(handler, app[REGISTRY])
        limiter = app[LIMITER]
        if limiter is not None and path in FETCHES and method in ("GET", "HEAD"):
            answered = limited(answered, limiter, app[CLOCK])
        if credentials is not None:  # no credentials, no guard: it costs nothing
            answered = guard(answered, plane(path), credentials)
        answered = from_this_site(answered, settings)
        return timed(answered, app[REQUESTS], endpoint, method)

    table = routes(app)
    for prefix in PREFIXES:
        for path, methods in table.items():
            # aiohttp's default segment pattern refuses braces; ids may contain them.
            pattern = prefix + re.sub(r"\{(\w+)\}", r"{\1:[^/]+}", path)
            _add(app, pattern, methods, wrap, path, "/eureka" + path)
    for path, methods in UNVERSIONED.items():
        _add(app, path, methods, wrap, path, path)
    # Counted too, so probing shows in /metrics: endpoint "none", and method "*" on a 405.
    unmatched = timed(json_errors(no_such_endpoint, app[REGISTRY]), app[REQUESTS], "none", "*")
    app.router.add_route("*", "/{tail:.*}", unmatched)


Wrap = Callable[[Handler, str, str, str], Handler]


def _add(
    app: web.Application,
    pattern: str,
    methods: dict[str, Handler],
    wrap: Wrap,
    path: str,
    endpoint: str,
) -> None:
    """The resource at `pattern`, with and without a trailing slash: its handlers (GET answering
    HEAD too) and a JSON 405 for other methods."""
    if "GET" in methods:
        methods = {**methods, "HEAD": methods["GET"]}
    refused = json_errors(method_not_allowed(list(methods)), app[REGISTRY])
    for variant in dict.fromkeys((pattern, pattern.rstrip("/") + "/")):  # "/" only once
        resource = app.router.add_resource(variant)
        for method, handler in methods.items():
            resource.add_route(method, wrap(handler, method, path, endpoint))
        resource.add_route("*", timed(refused, app[REQUESTS], endpoint, "*"))
