"""The heap keeper: the restored registry, and later what lives on, set aside from full
garbage collections."""

from __future__ import annotations

import gc

from registry import FakeClock, Settings, create_app
from tests.helpers import register


async def test_the_heap_is_frozen_at_start_and_then_every_interval(aiohttp_client):
    clock = FakeClock()
    gc.unfreeze()
    client = await aiohttp_client(create_app(Settings(gc_freeze_interval=10), clock=clock))
    assert gc.get_freeze_count() > 0
    await register(client, iid="i-1")
    before = gc.get_freeze_count()
    await clock.advance(10)
    assert gc.get_freeze_count() > before


async def test_zero_never_freezes(aiohttp_client):
    gc.unfreeze()
    await aiohttp_client(create_app(Settings(gc_freeze_interval=0), clock=FakeClock()))
    assert 0 == gc.get_freeze_count()
