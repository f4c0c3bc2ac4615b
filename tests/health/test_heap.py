"""The heap keeper: the restored registry, and later what lives on, set aside from full
garbage collections."""

from __future__ import annotations

import asyncio
import gc

from registry import FakeClock, Settings, create_app
from registry.appkeys import FEED, REGISTRY
from tests.helpers import register


async def test_the_heap_is_frozen_at_start_and_then_every_interval(aiohttp_client):
    clock = FakeClock()
    gc.unfreeze()
    client = await aiohttp_client(
        create_app(Settings.of(server__gc_freeze_interval=10), clock=clock)
    )
    assert gc.get_freeze_count() > 0
    await register(client, iid="i-1")
    before = gc.get_freeze_count()
    await clock.advance(10)
    assert gc.get_freeze_count() > before


async def test_zero_never_freezes(aiohttp_client):
    gc.unfreeze()
    await aiohttp_client(create_app(Settings.of(server__gc_freeze_interval=0), clock=FakeClock()))
    assert 0 == gc.get_freeze_count()


async def test_what_a_freeze_sets_aside_is_not_garbage_later(aiohttp_client):
    """Frozen objects are never walked again, so a reference cycle frozen while in use would
    never be freed: the requests' objects, frozen mid-flight, must be freed without the
    collector. Every kind of request, a freeze while each is under way, then everything is
    thawed: a collection finds nothing to free."""
    gc.unfreeze()
    gc.collect()  # what earlier tests left, before the start freezes it
    clock = FakeClock()
    client = await aiohttp_client(
        create_app(Settings.of(server__gc_freeze_interval=1), clock=clock)
    )
    paths = ["/eureka/apps/", "/eureka/apps/delta", "/eureka/apps/NOPE", "/eureka/apps/APP/i-1"]
    for round_ in range(3):
        await register(client, iid=f"i-{round_}")
        for path in paths:
            for headers in ({}, {"Accept-Encoding": "gzip"}, {"Accept": "application/xml"}):
                async with client.get(path, headers=headers) as response:
                    await clock.advance(1)  # a freeze while the request is under way
                    await response.read()
        await client.put("/eureka/apps/APP/i-0")
        await client.put("/eureka/apps/APP/none")
        await client.delete(f"/eureka/apps/APP/i-{round_}")
        index = client.app[REGISTRY].index
        poll = asyncio.ensure_future(client.get(f"/eureka/apps/delta?wait=1s&index={index}"))
        for _ in range(100):  # a freeze while the long-poll waits, until its wait is over
            await clock.advance(1)
            if poll.done():
                break
        assert 0 == client.app[FEED].polls
        (await poll).release()
    gc.unfreeze()
    assert 0 == gc.collect()
