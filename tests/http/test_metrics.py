"""GET /metrics: parsed by prometheus-client's own parser, moving with the registry."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from registry import Settings, create_app
from tests.helpers import register


async def scrape(client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await client.get("/metrics")
    assert 200 == response.status
    assert response.headers["Content-Type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(await response.text())
        for sample in family.samples
    }


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
        create_app(Settings(peers=("http://127.0.0.1:9/eureka/",)), clock=clock)
    )
    m = await scrape(client)
    assert 0 == m[("registry_replication_sent_total", (("peer", "http://127.0.0.1:9/eureka/"),))]
