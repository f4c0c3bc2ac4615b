"""GET /openapi.json: a valid OpenAPI 3.1 document that describes every route the server has."""

from __future__ import annotations

import asyncio

from openapi_spec_validator import validate

from registry.http.openapi import BASE, described, document
from registry.http.routes import UNVERSIONED, VERSIONED
from tests.helpers import fetch_json


async def test_the_document_is_served_and_valid(client):
    served = await fetch_json(client, "/openapi.json")
    assert document(VERSIONED, UNVERSIONED) == served
    await asyncio.to_thread(validate, served)  # it reads its schemas from disk


def test_every_route_and_method_is_described(client):
    paths = document(VERSIONED, UNVERSIONED)["paths"]
    expected = {
        (BASE + described(path), method.lower())
        for path, methods in VERSIONED.items()
        for method in methods
    } | {(path, method.lower()) for path, methods in UNVERSIONED.items() for method in methods}
    present = {
        (path, method) for path, item in paths.items() for method in item if method != "parameters"
    }
    assert expected - present == set(), "routes the document does not describe"
    assert present - expected == set(), "operations the server does not have"


async def test_each_operation_names_its_plane_and_security(client):
    paths = (await (await client.get("/openapi.json")).json())["paths"]
    assert "admin" == paths["/eureka/apps/{app}/{id}/status"]["put"]["x-plane"]
    assert "admin" == paths["/eureka/serverinfo/statusoverrides"]["get"]["x-plane"]
    assert "peer" == paths["/eureka/peerreplication/batch"]["post"]["x-plane"]
    assert [{"basic": []}] == paths["/eureka/peerreplication/batch"]["post"]["security"]
    heartbeat = paths["/eureka/apps/{app}/{id}"]["put"]
    assert ("client", {"401", "403"}) == (
        heartbeat["x-plane"],
        {"401", "403"} & set(heartbeat["responses"]),
    )
    assert ("open", []) == (
        paths["/healthz"]["get"]["x-plane"],
        paths["/healthz"]["get"]["security"],
    )
