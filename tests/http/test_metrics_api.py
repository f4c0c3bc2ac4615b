"""GET /metrics: parsed by prometheus-client's own parser, moving with the registry."""

from __future__ import annotations

from registry import Settings, create_app
from tests.helpers import eventually, register, scrape


def instances(metrics, app: str, status: str) -> float:
    return metrics.get(("registry_instances", (("app", app), ("status", status))), 0.0)


async def test_metrics_move_with_the_registry(client, clock):
    before = await scrape(client)
    assert 0 == before[("registry_registrations_total", ())]
    await register(client, iid="a")
    await register(client, iid="b")
    await client.put("/eureka/apps/ORDERS/a")
    await client.put("/eureka/apps/ORDERS/a/status?value=OUT_OF_SERVICE")
    await client.delete("/eureka/apps/ORDERS/b")
    await client.get("/eureka/apps")
    await client.get("/eureka/apps")
    m = await scrape(client)
    assert (1.0, 0.0) == (instances(m, "ORDERS", "OUT_OF_SERVICE"), instances(m, "ORDERS", "UP"))
    assert 2 == m[("registry_registrations_total", ())]
    assert 1 == m[("registry_cancels_total", ())]
    assert 1 == m[("registry_renewals_total", ())]
    assert 1 == m[("registry_cache_hits_total", ())]
    assert 1 == m[("registry_eviction_enabled", ())]
    assert -1 == m[("registry_renews_last_minute", ())]  # not a full minute yet
    await clock.advance(200)  # a is evicted
    m = await scrape(client)
    assert 1 == m[("registry_evictions_total", ())]
    assert 0 == instances(m, "ORDERS", "OUT_OF_SERVICE")
    assert 0 == m[("registry_store_degraded", ())]


async def test_each_peer_has_its_replication_figures(aiohttp_client, clock):
    client = await aiohttp_client(
        create_app(Settings.of(peers__urls=("http://127.0.0.1:9/eureka/",)), clock=clock)
    )
    m = await scrape(client)
    assert 0 == m[("registry_replication_sent_total", (("peer", "http://127.0.0.1:9/eureka/"),))]


def requests(metrics, endpoint: str, method: str, status: str, suffix: str = "count") -> float:
    labels = (("endpoint", endpoint), ("method", method), ("status", status))
    return metrics.get((f"registry_http_request_duration_seconds_{suffix}", labels), 0.0)


async def test_requests_are_counted_and_timed_by_endpoint_method_and_status(client, clock):
    heartbeat = "/eureka/apps/{app}/{id}"
    await register(client, iid="a")
    for _ in range(3):
        assert 200 == (await client.put("/eureka/apps/ORDERS/a")).status
    assert 404 == (await client.put("/eureka/v2/apps/ORDERS/nobody")).status
    await client.get("/healthz")
    m = await scrape(client)
    assert 3 == requests(m, heartbeat, "PUT", "200")  # both prefixes under one endpoint
    assert 1 == requests(m, heartbeat, "PUT", "404")
    assert 1 == requests(m, "/eureka/apps/{app}", "POST", "204")
    assert 1 == requests(m, "/healthz", "GET", "200")
    assert 0 < requests(m, heartbeat, "PUT", "200", "sum")
    labels = (("endpoint", heartbeat), ("le", "+Inf"), ("method", "PUT"), ("status", "200"))
    assert 3 == m[("registry_http_request_duration_seconds_bucket", labels)]


async def test_the_event_loops_lateness_is_measured(client):
    """The loop-lag monitor runs in the app (every 10 ms of the real loop) and its looks are
    counted, look after look; the maxima are in seconds."""
    count = ("registry_event_loop_lag_seconds_count", ())
    first = await eventually(lambda: scrape(client), lambda m: m[count] > 0, what="a look")
    await eventually(lambda: scrape(client), lambda m: m[count] > first[count], what="more")
    assert 0 <= first[("registry_event_loop_lag_max_seconds", ())] < 10
