"""The route table: every route declares its plane and documentation, and what the server
does (auth, throttling, `/openapi.json`) agrees with it, route by route."""

from __future__ import annotations

import dataclasses
import re

import pytest

from registry import Settings
from registry.codec.wire import INDEX_HEADER
from registry.http import api_docs, instance_api
from registry.http.auth import Plane
from registry.http.openapi import BASE, described
from registry.http.route import Route
from registry.http.routes import UNVERSIONED, VERSIONED
from tests.credentials import AS_ADMIN, AS_CLIENT, AS_PEER, SECURED

SAMPLES = {"app": "ORDERS", "id": "i-1", "vip": "orders", "name": "status.js"}
BURST = 3
ROUTES = [
    (BASE + path, method, route)
    for path, methods in VERSIONED.items()
    for method, route in methods.items()
] + [
    (path, method, route)
    for path, methods in UNVERSIONED.items()
    for method, route in methods.items()
]


def url(path: str) -> str:
    """A route's path with a sample value for each of its {placeholders}."""
    return re.sub(r"\{(\w+)\}", lambda m: SAMPLES[m.group(1)], described(path))


@pytest.fixture
def settings() -> Settings:
    return SECURED.replace(limits__fetch_rate_limit=0.001, limits__fetch_burst=BURST)


def test_a_route_cannot_be_written_without_a_plane():
    """`plane` has no default: leaving it out fails where the route is written."""
    with pytest.raises(TypeError, match="plane"):
        Route(doc=api_docs.CANCEL, handler=instance_api.cancel)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("taken_away", "error"),
    [
        ({"plane": "client"}, "a route's plane must be a Plane, not 'client'"),
        ({"doc": {"summary": "x"}}, "a route's documentation needs a summary and its responses"),
        ({"doc": {"responses": {}}}, "a route's documentation needs a summary and its responses"),
        ({"handler": None, "build": None}, "a route has a handler or a way to build one"),
        (
            {"handler": instance_api.cancel, "build": lambda app: instance_api.cancel},
            "a route has a handler or a way to build one",
        ),
    ],
    ids=["plane-not-a-plane", "no-responses", "no-summary", "no-handler", "two-handlers"],
)
def test_every_route_of_the_table_is_refused_with_a_part_taken_away(taken_away, error):
    """Each route the table holds, made again with one part missing or wrong, fails with the
    check's own error: the table's routes all pass the check that refuses these."""
    for path, method, route in ROUTES:
        with pytest.raises(TypeError, match=error):
            dataclasses.replace(route, **taken_away)
        assert route == dataclasses.replace(route), (method, path)  # and passes it whole


async def test_the_served_document_names_each_routes_plane_and_refusals(client):
    paths = (await (await client.get("/openapi.json")).json())["paths"]
    for path, method, route in ROUTES:
        operation = paths[described(path)][method.lower()]
        assert route.plane.name.lower() == operation["x-plane"], (method, path)
        assert (route.plane is not Plane.OPEN) == ("401" in operation["responses"])
        assert route.limited == ("429" in operation["responses"]), (method, path)


@pytest.mark.parametrize(
    ("path", "method", "route"), ROUTES, ids=[f"{m} {p}" for p, m, _ in ROUTES]
)
async def test_each_route_is_guarded_as_its_plane_says(client, path, method, route):
    """No credential: 401 everywhere but on the open plane, answered by the one error table
    (a JSON body and the index headers). Another plane's credential: 403."""
    answered = await client.request(method, url(path))
    if route.plane is Plane.OPEN:
        assert answered.status not in (401, 403)
        return
    assert 401 == answered.status
    assert "unauthorized" == (await answered.json())["error"]
    assert INDEX_HEADER in answered.headers
    other = {Plane.CLIENT: None, Plane.ADMIN: AS_CLIENT, Plane.PEER: AS_ADMIN}[route.plane]
    if other is not None:
        refused = await client.request(method, url(path), headers=other)
        assert 403 == refused.status
        assert INDEX_HEADER in refused.headers


async def test_exactly_the_routes_marked_limited_are_throttled(client):
    """One client's bucket, emptied by one fetch route: every route marked limited then
    answers 429 (with Retry-After, through the error table), and no other GET does."""
    for _ in range(BURST):
        assert 200 == (await client.get(BASE + "/apps", headers=AS_CLIENT)).status
    for path, method, route in ROUTES:
        if method != "GET":
            continue
        credential = {Plane.ADMIN: AS_ADMIN, Plane.PEER: AS_PEER}.get(route.plane, AS_CLIENT)
        answered = await client.get(url(path), headers=credential)
        assert route.limited == (answered.status == 429), (path, answered.status)
        if route.limited:
            assert "Retry-After" in answered.headers and INDEX_HEADER in answered.headers


async def test_a_body_over_the_limit_is_a_413_from_the_error_table(aiohttp_client, clock):
    from registry import create_app

    client = await aiohttp_client(create_app(Settings.of(limits__max_body_bytes=1024), clock=clock))
    answered = await client.post(BASE + "/apps/ORDERS", data=b"{" + b" " * 2048 + b"}")
    assert 413 == answered.status
    assert "body_too_large" == (await answered.json())["error"]
    assert INDEX_HEADER in answered.headers
