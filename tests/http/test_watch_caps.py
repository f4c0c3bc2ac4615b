"""Watch streams capped per node and per client, and streams of one filter sharing its work:
a stream past a cap is refused 429 in JSON with a Retry-After and counted in /metrics, and
holds nothing; a place comes back when a stream ends."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from registry import Settings
from registry.appkeys import FEED
from tests.credentials import basic
from tests.helpers import eventually, next_event, register

ORDERS, BILLING = basic("orders", "o-pw"), basic("billing", "b-pw")


async def opened(client: TestClient, query: str = "", **headers: str) -> ClientResponse:
    stream = await client.get(f"/eureka/watch{query}", headers=headers)
    assert 200 == stream.status, await stream.text()
    assert "watching" == (await next_event(stream))["event"]
    return stream


async def refused(client: TestClient, **headers: str) -> dict[str, str]:
    """The body of a stream refused 429, with its Retry-After."""
    response = await client.get("/eureka/watch?apps=ORDERS", headers=headers)
    assert (429, "30") == (response.status, response.headers.get("Retry-After"))
    body: dict[str, str] = await response.json()
    assert "too_many_requests" == body["error"]
    return body


async def refusals(client: TestClient, **headers: str) -> dict[str, float]:
    """`registry_watch_refused_total` by reason, as /metrics shows it."""
    response = await client.get("/metrics", headers=headers)
    assert 200 == response.status
    return {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(await response.text())
        for sample in family.samples
        if sample.name == "registry_watch_refused_total"
    }


class TestPerCredential:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(
            credentials__clients=("orders:o-pw", "billing:b-pw"),
            reads__watch_streams_per_credential=2,
        )

    async def test_a_credential_past_its_cap_is_refused_and_others_are_not(self, client):
        mine = [await opened(client, **ORDERS), await opened(client, "?apps=X", **ORDERS)]
        body = await refused(client, **ORDERS)
        assert "credential orders holds 2 watch streams" in body["detail"]
        theirs = await opened(client, **BILLING)
        assert 3 == client.app[FEED].watchers
        assert {"node": 0, "credential": 1} == await refusals(client, **ORDERS)
        mine[0].close()
        await eventually(lambda: client.app[FEED].watchers, lambda n: n == 2, what="closed")
        mine.append(await opened(client, **ORDERS))  # its place came back
        for stream in [*mine, theirs]:
            stream.close()


class TestPerNode:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(reads__watch_streams_max=2)

    async def test_a_node_past_its_cap_refuses_any_client(self, client):
        streams = [await opened(client), await opened(client, "?apps=ORDERS")]
        body = await refused(client)
        assert "this node serves 2 watch streams at most" in body["detail"]
        assert {"node": 1, "credential": 0} == await refusals(client)
        assert (200, 2) == (
            (await client.head("/eureka/watch")).status,  # a HEAD opens no stream
            client.app[FEED].watchers,
        )
        for stream in streams:
            stream.close()


class TestWithoutCredentials:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(reads__watch_streams_per_credential=1)

    async def test_a_client_is_its_address(self, client):
        stream = await opened(client)
        body = await refused(client)
        assert "address 127.0.0.1 holds 1 watch streams" in body["detail"]
        stream.close()


class TestSharedFilters:
    async def test_streams_naming_the_same_applications_share_one_subscription(self, client):
        """Order, case and repetition aside, the same names are one filter: one subscription,
        one frame written to both."""
        queries = ["?apps=orders,PAYMENTS,orders", "?apps=payments,ORDERS", "?apps=BILLING"]
        async with aiohttp.ClientSession() as session:
            base = f"http://{client.host}:{client.port}/eureka/watch"
            streams = [await session.get(base + query) for query in queries]
            for stream in streams:
                assert "watching" == (await next_event(stream))["event"]
            fanout = client.app[FEED].fanout
            await eventually(lambda: len(fanout), lambda n: n == 3, what="all caught up")
            assert 2 == fanout.subscriptions
            await register(client, "PAYMENTS", "p-1")
            first, second = [await stream.content.readuntil(b"\n\n") for stream in streams[:2]]
            assert first == second and b'"hashcode":"UP_1_"' in first
            for stream in streams:
                stream.close()
