"""`Route`: one method of one path in the route table (routes.py), as the table, the guard and
`/openapi.json` (openapi.py) read it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler

from registry.http import api_docs
from registry.http.auth import Plane


@dataclass(frozen=True, kw_only=True)
class Route:
    """One method of one path: what answers it, who may call it, and what it does.

    `plane` has no default: a route that does not say who may call it fails at start-up rather
    than falling to a plane by accident. `build` makes a handler from the application's parts
    once, where a hot path should not look them up per request. `limited`: a registry fetch,
    under the per-client fetch rate limit (`limits.fetch_rate_limit`).
    """

    plane: Plane
    doc: api_docs.Operation
    handler: Handler | None = None
    build: Callable[[web.Application], Handler] | None = None
    limited: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.plane, Plane):
            raise TypeError(f"a route's plane must be a Plane, not {self.plane!r}")
        if (self.handler is None) == (self.build is None):
            raise TypeError("a route has a handler or a way to build one, not both or neither")
        if not self.doc.get("summary") or not self.doc.get("responses"):
            raise TypeError("a route's documentation needs a summary and its responses")

    def made(self, app: web.Application) -> Handler:
        if self.build is not None:
            return self.build(app)
        assert self.handler is not None  # one of the two, by __post_init__
        return self.handler
