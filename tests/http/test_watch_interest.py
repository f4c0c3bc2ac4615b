"""`watch?apps=A,B` and `watch?vips=v`: a stream that cares about some applications or VIP
addresses gets their changes alone, each without the registry's hashcode, and the last event
that leaves it caught up with the hashcode of what it watches."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient

from registry.appkeys import FEED
from registry.common.clock import FakeClock
from registry.reads.feed import KEEPALIVE
from tests.helpers import eventually, next_event, register


async def watching(client: TestClient, query: str, **headers: str) -> ClientResponse:
    stream = await client.get(f"/eureka/watch?{query}", headers=headers)
    assert 200 == stream.status
    assert "watching" == (await next_event(stream))["event"]
    return stream


async def next_change(stream: ClientResponse) -> dict[str, Any]:
    """The next event, past the `id` lines that move a stream on over changes it skips."""
    while "event" not in (frame := await next_event(stream)):
        pass
    return frame


async def test_only_the_watched_applications_changes_come(client: TestClient):
    stream = await watching(client, "apps=orders,payments")
    await register(client, "BILLING", "b-1")
    await register(client, "ORDERS", "o-1")
    await register(client, "BILLING", "b-2")
    await register(client, "PAYMENTS", "p-1", status="DOWN")
    first, second = await next_change(stream), await next_change(stream)
    assert [("ORDERS", "o-1"), ("PAYMENTS", "p-1")] == [
        (e["data"]["app"], e["data"]["instanceId"]) for e in (first, second)
    ]
    # Each caught the stream up: each carries the hashcode of what it watches, not the
    # registry's (which counts BILLING's two).
    assert ["UP_1_", "DOWN_1_UP_1_"] == [e["data"]["hashcode"] for e in (first, second)]
    stream.close()


async def test_a_vip_address_is_watched_plain_or_secure(client: TestClient):
    stream = await watching(client, "vips=checkout")
    await register(client, "BILLING", "b-1")
    await register(client, "ORDERS", "o-1", vipAddress="orders,checkout")
    await register(client, "CARTS", "c-1", secureVipAddress="checkout")
    events = [await next_change(stream), await next_change(stream)]
    assert [("ORDERS", "UP_1_"), ("CARTS", "UP_2_")] == [
        (e["data"]["app"], e["data"]["hashcode"]) for e in events
    ]
    stream.close()


async def test_a_resumed_stream_replays_only_what_it_watches(client: TestClient):
    await register(client, "BILLING", "b-1")
    first = await watching(client, "apps=ORDERS")
    await register(client, "ORDERS", "o-1")
    seen = await next_change(first)
    first.close()
    await register(client, "BILLING", "b-2")
    await register(client, "ORDERS", "o-2")
    await register(client, "ORDERS", "o-3")
    resumed = await watching(client, "apps=ORDERS", **{"Last-Event-ID": seen["id"]})
    replayed = [await next_change(resumed), await next_change(resumed)]
    assert ["o-2", "o-3"] == [e["data"]["instanceId"] for e in replayed]
    # Only the one that caught the stream up says a hashcode.
    assert [False, True] == ["hashcode" in e["data"] for e in replayed]
    assert "UP_3_" == replayed[1]["data"]["hashcode"]
    resumed.close()


@pytest.mark.parametrize(
    "query", ["apps=", "apps=ORDERS,", "vips=a%20b", "apps=" + ",".join(["A"] * 101)]
)
async def test_a_list_that_names_nothing_or_too_much_is_refused(client: TestClient, query: str):
    response = await client.get(f"/eureka/watch?{query}")
    assert 400 == response.status
    assert (await response.json())["field"] in ("apps", "vips")


async def test_a_stream_that_skips_changes_moves_its_id_on_at_the_beat(
    client: TestClient, clock: FakeClock
):
    """Else, quiet for longer than the journal keeps changes, it could only resume from a
    forgotten one, and be reset. On the feed's beat, not per change: a change a stream does
    not want costs it no write."""
    stream = await watching(client, "apps=ORDERS")
    await eventually(lambda: len(client.app[FEED].fanout) == 1)
    await register(client, "BILLING", "b-1")
    await clock.advance(KEEPALIVE)
    frame = await next_event(stream)
    assert (": keepalive", "1", False) == (
        frame["comment"],
        frame["id"].split("@")[0],
        "event" in frame,
    )
    stream.close()


async def test_an_instance_that_leaves_a_watched_vip_is_sent(client: TestClient):
    stream = await watching(client, "vips=checkout")
    await register(client, "ORDERS", "o-1", vipAddress="checkout")
    assert "checkout" == (await next_change(stream))["data"]["instance"]["vipAddress"]
    await register(client, "ORDERS", "o-1", vipAddress="orders", lastDirtyTimestamp="1735689000500")
    left = await next_change(stream)
    assert ("o-1", "orders", "") == (
        left["data"]["instanceId"],
        left["data"]["instance"]["vipAddress"],
        left["data"]["hashcode"],
    )
    stream.close()
