"""Fetch rate limits: a bounded burst gets 429 with Retry-After while heartbeats keep passing."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from registry import Settings
from tests.helpers import JSON, register

RATE, BURST = 2.0, 5


@pytest.fixture
def settings() -> Settings:
    return Settings.of(limits__fetch_rate_limit=RATE, limits__fetch_burst=BURST)


async def test_a_burst_of_fetches_is_cut_at_the_bucket_and_heartbeats_all_pass(client, clock):
    await register(client)
    paths = ["/eureka/apps", "/eureka/apps/delta", "/eureka/apps/ORDERS", "/eureka/vips/orders"]
    fetches = [client.get(paths[n % len(paths)], headers=JSON) for n in range(40)]
    heartbeats = [client.put("/eureka/apps/ORDERS/i-1") for _ in range(40)]
    answers = await asyncio.gather(
        *(x for pair in zip(fetches, heartbeats, strict=True) for x in pair)
    )
    fetched, beat = answers[0::2], answers[1::2]
    assert [200] * 40 == [r.status for r in beat]
    assert BURST == sum(r.status == 200 for r in fetched)
    refused = [r for r in fetched if r.status == 429]
    assert 40 - BURST == len(refused)
    assert {"1"} == {r.headers["Retry-After"] for r in refused}
    body = await refused[0].json()
    assert "too_many_requests" == body["error"] and "retry after" in body["detail"]


async def test_the_bucket_refills_at_the_rate(client, clock):
    for _ in range(BURST):
        assert 200 == (await client.get("/eureka/apps", headers=JSON)).status
    assert 429 == (await client.get("/eureka/apps/delta", headers=JSON)).status
    await clock.advance(1 / RATE)
    assert 200 == (await client.get("/eureka/apps/delta", headers=JSON)).status
    assert 429 == (await client.get("/eureka/apps", headers=JSON)).status


async def test_registrations_instance_reads_and_status_are_not_fetches(client, clock):
    for _ in range(BURST):
        await client.get("/eureka/apps", headers=JSON)
    for n in range(3 * BURST):
        await register(client, iid=f"i-{n}")
        assert 200 == (await client.get(f"/eureka/apps/ORDERS/i-{n}", headers=JSON)).status
        assert 200 == (await client.get("/eureka/status", headers=JSON)).status
        assert 200 == (await client.get("/healthz")).status


async def test_throttled_fetches_show_in_metrics(client, clock):
    for _ in range(BURST + 3):
        await client.get("/eureka/apps", headers=JSON)
    families = {
        f.name: f
        for f in text_string_to_metric_families(await (await client.get("/metrics")).text())
    }
    [sample] = families["registry_fetches_throttled"].samples
    assert 3 == sample.value


async def test_a_zero_rate_turns_the_limit_off(aiohttp_client, clock):
    from registry import create_app

    client = await aiohttp_client(create_app(Settings.of(limits__fetch_rate_limit=0), clock=clock))
    answers = [await client.get("/eureka/apps", headers=JSON) for _ in range(300)]
    assert {200} == {r.status for r in answers}


async def test_peers_are_never_throttled(client, clock):
    """A peer's fetches (the replication header) pass however many: anti-entropy pulls many
    applications at once."""
    await register(client)
    as_peer = {**JSON, "x-netflix-discovery-replication": "true"}
    for _ in range(4 * BURST):
        assert 200 == (await client.get("/eureka/apps/ORDERS", headers=as_peer)).status
    for _ in range(BURST):
        assert 200 == (await client.get("/eureka/apps", headers=JSON)).status
    assert 429 == (await client.get("/eureka/apps", headers=JSON)).status  # clients still are


@pytest.mark.parametrize(
    "path", ["/", "/eureka/instances/i-1", "/eureka/watch?index=0"], ids=["page", "by-id", "replay"]
)
async def test_reads_that_cost_more_than_a_lookup_are_limited_too(client, path):
    """The status page (the whole registry rendered), an instance looked up in every
    application, a watch that replays the journal: a client's bucket pays for each."""
    await register(client)
    answers = [await client.get(path, headers=JSON) for _ in range(BURST + 1)]
    for answer in answers:
        answer.close()
    assert [200] * BURST + [429] == [a.status for a in answers]


async def test_a_watch_from_now_is_not_limited(client):
    """Opening a stream from the current index replays nothing: hundreds of watchers may."""
    for _ in range(BURST + 1):
        answer = await client.get("/eureka/watch")
        assert 200 == answer.status
        answer.close()
