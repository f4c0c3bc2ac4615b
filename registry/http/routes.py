"""The route table, served under `/eureka/` and `/eureka/v2/` (and `/eureka/v1/`, harmlessly),
each path with and without a trailing slash, as JAX-RS clients expect (contract 1)."""

from __future__ import annotations

import re

from aiohttp import web
from aiohttp.typedefs import Handler

from registry.http import admin_api, client_api, discovery_api, server_info

PREFIXES = ("/eureka", "/eureka/v2", "/eureka/v1")

# (method, path under the prefix, handler). `apps/delta` comes before `apps/{app}` so the
# literal wins; app names are upper-cased by the handlers.
ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "/apps", discovery_api.full_registry),
    ("GET", "/apps/delta", discovery_api.delta),
    ("POST", "/apps/{app}", client_api.register),
    ("GET", "/apps/{app}", discovery_api.application),
    ("PUT", "/apps/{app}/{id}", client_api.renew),
    ("DELETE", "/apps/{app}/{id}", client_api.cancel),
    ("GET", "/apps/{app}/{id}", discovery_api.instance),
    ("PUT", "/apps/{app}/{id}/status", admin_api.set_status_override),
    ("DELETE", "/apps/{app}/{id}/status", admin_api.delete_status_override),
    ("PUT", "/apps/{app}/{id}/metadata", admin_api.update_metadata),
    ("GET", "/instances/{id}", discovery_api.instance_by_id),
    ("GET", "/vips/{vip}", discovery_api.vip),
    ("GET", "/svips/{vip}", discovery_api.secure_vip),
    ("GET", "/status", server_info.status),
)


def add_routes(app: web.Application) -> None:
    for prefix in PREFIXES:
        for method, path, handler in ROUTES:
            # aiohttp's default segment pattern refuses braces; ids may contain them.
            pattern = re.sub(r"\{(\w+)\}", r"{\1:[^/]+}", path)
            for variant in (pattern, pattern + "/"):
                app.router.add_route(method, prefix + variant, handler)
    # Netflix serves the override dump outside the versioned API.
    for path in ("/eureka/serverinfo/statusoverrides", "/eureka/serverinfo/statusoverrides/"):
        app.router.add_get(path, admin_api.status_overrides)
