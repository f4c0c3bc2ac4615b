"""The route table, served under `/eureka/` and `/eureka/v2/` (and `/eureka/v1/`, harmlessly),
each path with and without a trailing slash, as JAX-RS clients expect (contract 1)."""

from __future__ import annotations

import re

from aiohttp import web
from aiohttp.typedefs import Handler

from peers import batch_handler, digest
from registry import metrics
from registry.appkeys import CLOCK, REGISTRY
from registry.http import (
    admin_api,
    client_api,
    discovery_api,
    openapi,
    server_info,
    watch_api,
)
from registry.http.error_handling import json_errors, method_not_allowed, no_such_endpoint

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
        "/peerreplication/batch": {"POST": batch_handler.batch},
        "/peerreplication/digest": {"GET": digest.digests},
    }


# Netflix serves the override dump outside the versioned API.
UNVERSIONED: dict[str, dict[str, Handler]] = {
    "/eureka/serverinfo/statusoverrides": {"GET": admin_api.status_overrides},
    "/healthz": {"GET": server_info.healthz},
    "/readyz": {"GET": server_info.readyz},
    "/openapi.json": {"GET": openapi.openapi},
    "/metrics": {"GET": metrics.metrics},
}


def add_routes(app: web.Application) -> None:
    table = routes(app)
    for prefix in PREFIXES:
        for path, methods in table.items():
            # aiohttp's default segment pattern refuses braces; ids may contain them.
            pattern = prefix + re.sub(r"\{(\w+)\}", r"{\1:[^/]+}", path)
            for variant in (pattern, pattern + "/"):
                _add(app, variant, methods)
    for path, methods in UNVERSIONED.items():
        for variant in (path, path + "/"):
            _add(app, variant, methods)
    app.router.add_route("*", "/{tail:.*}", json_errors(no_such_endpoint, app[REGISTRY]))


def _add(app: web.Application, path: str, methods: dict[str, Handler]) -> None:
    """One resource: its handlers (GET answering HEAD too) and a JSON 405 for other methods."""
    if "GET" in methods:
        methods = {**methods, "HEAD": methods["GET"]}
    resource = app.router.add_resource(path)
    for method, handler in methods.items():
        resource.add_route(method, json_errors(handler, app[REGISTRY]))
    resource.add_route("*", json_errors(method_not_allowed(list(methods)), app[REGISTRY]))
