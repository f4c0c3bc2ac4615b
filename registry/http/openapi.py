"""GET /openapi.json: an OpenAPI 3.1 description of the whole HTTP API, made from the route
table: each operation is documented by its route (api_docs.py), with its plane and security.

Paths are given under `/eureka/`; the same API answers under `/eureka/v2/` (and `/eureka/v1/`),
each path with or without a trailing slash.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from registry.http import api_docs
from registry.http.auth import Plane
from registry.http.route import Route

BASE = "/eureka"
Table = Mapping[str, Mapping[str, Route]]

_SECURITY: dict[Plane, list[dict[str, list[str]]]] = {
    Plane.OPEN: [],
    Plane.CLIENT: [{"basic": []}, {"bearer": []}],
    Plane.ADMIN: [{"basic": []}, {"bearer": []}],
    Plane.PEER: [{"basic": []}],
}
_SCHEMES = {
    "basic": {
        "type": "http",
        "scheme": "basic",
        "description": "A client, admin or peer credential (`credentials.clients`, "
        "`credentials.admins`, `credentials.peer`), as the operation's x-plane requires.",
    },
    "bearer": {"type": "http", "scheme": "bearer", "description": "An admin token."},
}


def described(path: str) -> str:
    """A route's path as the document names it: `{app:delta}` is the literal `delta`."""
    return re.sub(r"\{\w+:(\w+)\}", r"\1", path)


def _item(path: str, methods: Mapping[str, Route]) -> dict[str, Any]:
    """A path's item: its parameters, and each method's operation with its plane."""
    names = re.findall(r"\{(\w+)\}", described(path))
    item: dict[str, Any] = {"parameters": [api_docs.PATH_PARAMETERS[n] for n in names]}
    for method, route in methods.items():
        responses = route.doc["responses"]
        if route.plane is not Plane.OPEN:
            responses = responses | api_docs.REFUSED
        if route.limited:
            responses = responses | api_docs.THROTTLED
        item[method.lower()] = route.doc | {
            "x-plane": route.plane.name.lower(),
            "security": _SECURITY[route.plane],
            "responses": responses,
        }
    return item if names else {k: v for k, v in item.items() if k != "parameters"}


def document(versioned: Table, unversioned: Table) -> dict[str, Any]:
    paths = {BASE + described(path): _item(path, m) for path, m in versioned.items()}
    paths |= {path: _item(path, m) for path, m in unversioned.items()}
    return {
        "openapi": "3.1.0",
        "info": {"title": "service-registry", "version": "1", "description": __doc__},
        "paths": paths,
        "components": {
            "schemas": {"Error": api_docs.ERROR_SCHEMA},
            "securitySchemes": _SCHEMES,
        },
    }


def serving(versioned: Table, unversioned: Table) -> Handler:
    """The handler of GET /openapi.json, for the document of these tables (made once)."""
    body = orjson.dumps(document(versioned, unversioned))

    async def openapi(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    return openapi
