"""The memory watermark: clients' new instances refused (503) above it, nothing else."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from registry import Settings
from registry.appkeys import MEMORY
from registry.health.memory import MemoryGuard, resident_bytes, watermark
from tests.helpers import JSON, instance_doc, register


@pytest.fixture
def settings() -> Settings:
    return Settings.of(limits__memory_watermark_mb=64)


async def test_above_the_watermark_new_instances_are_refused_and_nothing_else(client):
    await register(client, iid="before")
    client.app[MEMORY].resident = 65 << 20  # as the next reading would find
    refused = await client.post(
        "/eureka/apps/ORDERS", json={"instance": instance_doc("ORDERS", "after")}, headers=JSON
    )
    assert (503, "memory_full") == (refused.status, (await refused.json())["error"])
    assert "Retry-After" in refused.headers
    assert 200 == (await client.put("/eureka/apps/ORDERS/before")).status
    await register(client, iid="before")  # registering again: no new instance
    client.app[MEMORY].resident = 63 << 20
    await register(client, iid="after")


def test_the_resident_memory_is_read_and_the_watermark_set():
    guard = MemoryGuard(watermark(64))
    guard.sample()
    assert abs(guard.resident - resident_bytes()) < 64 << 20
    assert 10 << 20 < guard.resident  # a Python process with the registry loaded
    assert (64 << 20) == guard.watermark


async def test_the_watermark_and_the_reading_are_in_the_metrics(client):
    client.app[MEMORY].resident = 5 << 20
    metrics = await (await client.get("/metrics")).text()
    values = {
        family.name: family.samples[0].value
        for family in text_string_to_metric_families(metrics)
        if family.name.startswith("registry_memory")
    }
    assert {
        "registry_memory_watermark_bytes": 64 << 20,
        "registry_memory_resident_bytes": 5 << 20,
    } == values
