"""Watches: the long-poll delta, the SSE stream, and X-Registry-Index on every response."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp import ClientResponse

from registry import Settings
from registry.appkeys import FEED
from registry.reads import fanout as fanout_module
from tests.factories import T0, make
from tests.helpers import (
    JSON,
    eventually,
    fetch_json,
    next_event,
    register,
    registry_of,
    scrape,
)

INDEX = "X-Registry-Index"


async def index_of(client) -> int:
    return int((await client.get("/eureka/apps", headers=JSON)).headers[INDEX])


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


class TestIndexHeader:
    async def test_every_registry_response_carries_the_index(self, client):
        """Writes, reads and errors all say the index the registry is at."""
        await register(client)
        responses = [
            await client.put("/eureka/apps/ORDERS/i-1"),
            await client.get("/eureka/apps", headers=JSON),
            await client.get("/eureka/apps/delta", headers=JSON),
            await client.get("/eureka/apps/ORDERS/i-1", headers=JSON),
            await client.get("/eureka/apps/NOPE", headers=JSON),
            await client.put("/eureka/apps/ORDERS/i-1/status?value=DOWN"),
        ]
        assert ["1", "1", "1", "1", "1", "2"] == [r.headers[INDEX] for r in responses]
        epoch = registry_of(client).epoch
        assert {epoch} == {r.headers["X-Registry-Epoch"] for r in responses}

    async def test_a_cached_document_says_the_index_it_shows(self, client):
        await register(client)
        first = await client.get("/eureka/apps", headers=JSON)
        await register(client, iid="i-2")
        second = await client.get("/eureka/apps", headers=JSON)
        assert ("1", "2") == (first.headers[INDEX], second.headers[INDEX])


class TestLongPoll:
    async def test_answers_as_soon_as_the_index_passes(self, client):
        """Held while nothing changes; answered with just the new change when one comes."""
        await register(client)
        start = await index_of(client)
        poll = asyncio.ensure_future(
            client.get(f"/eureka/apps/delta?index={start}&wait=30s", headers=JSON)
        )
        await settle()
        assert not poll.done()
        assert 1 == client.app[FEED].polls
        await register(client, iid="i-2")
        response = await asyncio.wait_for(poll, 5)
        doc = (await response.json())["applications"]
        assert ["i-2"] == [i["instanceId"] for a in doc["application"] for i in a["instance"]]
        assert str(start + 1) == response.headers[INDEX] == doc["versions__delta"]
        assert "UP_2_" == doc["apps__hashcode"]

    async def test_polls_that_time_out_leave_nothing_waiting(self, client, clock):
        """Each poll's wait is a timer, gone with it: thousands of idle clients polling for
        hours leave nothing behind."""
        await register(client)
        start = await index_of(client)
        for _ in range(3):
            poll = asyncio.ensure_future(
                client.get(f"/eureka/apps/delta?index={start}&wait=30s", headers=JSON)
            )
            await settle()
            assert 1 == client.app[FEED].waiting
            await clock.advance(30)
            assert 200 == (await asyncio.wait_for(poll, 5)).status
            assert 0 == client.app[FEED].waiting

    async def test_answers_empty_at_the_timeout(self, client, clock):
        await register(client)
        start = await index_of(client)
        poll = asyncio.ensure_future(
            client.get(f"/eureka/apps/delta?index={start}&wait=30s", headers=JSON)
        )
        await settle()
        await clock.advance(29)
        assert not poll.done()
        await clock.advance(1)
        response = await asyncio.wait_for(poll, 5)
        doc = (await response.json())["applications"]
        assert ([], str(start)) == (doc["application"], response.headers[INDEX])

    async def test_an_index_already_passed_answers_at_once_with_what_changed_since(self, client):
        await register(client)
        start = await index_of(client)
        await register(client, iid="i-2")
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        doc = await fetch_json(client, f"/eureka/apps/delta?index={start}&wait=30s")
        instances = [i for a in doc["applications"]["application"] for i in a["instance"]]
        assert [("i-2", "ADDED"), ("i-1", "MODIFIED")] == [
            (i["instanceId"], i["actionType"]) for i in instances
        ]

    async def test_wait_alone_waits_for_the_next_change(self, client, clock):
        await register(client)
        poll = asyncio.ensure_future(client.get("/eureka/apps/delta?wait=5s", headers=JSON))
        await settle()
        await client.delete("/eureka/apps/ORDERS/i-1")
        doc = await (await asyncio.wait_for(poll, 5)).json()
        instances = doc["applications"]["application"][0]["instance"]
        assert [("i-1", "DELETED")] == [(i["instanceId"], i["actionType"]) for i in instances]

    async def test_xml_and_gzip_long_polls(self, client):
        await register(client)
        start = await index_of(client)
        await register(client, iid="i-2")
        response = await client.get(
            f"/eureka/apps/delta?index={start}", headers={"Accept-Encoding": "gzip"}
        )
        assert "gzip" == response.headers["Content-Encoding"]
        assert b"<instanceId>i-2</instanceId>" in await response.read()

    @pytest.mark.parametrize("wait", ["10m", "3600", "301s"])
    async def test_waits_are_cut_to_five_minutes(self, client, clock, wait):
        start = await index_of(client)
        poll = asyncio.ensure_future(client.get(f"/eureka/apps/delta?index={start}&wait={wait}"))
        await settle()
        await clock.advance(299)
        assert not poll.done()
        await clock.advance(1)
        assert 200 == (await asyncio.wait_for(poll, 5)).status

    @pytest.mark.parametrize(
        ("query", "field"),
        [
            ("index=abc", "index"),
            ("index=-1", "index"),
            ("wait=forever", "wait"),
            ("wait=1h", "wait"),
        ],
    )
    async def test_bad_parameters_are_400(self, client, query, field):
        response = await client.get(f"/eureka/apps/delta?{query}")
        body = await response.json()
        assert (400, field) == (response.status, body["field"])

    async def test_an_index_ahead_of_the_node_is_410(self, client):
        response = await client.get("/eureka/apps/delta?index=99&wait=1s")
        body = await response.json()
        assert (410, "index_expired") == (response.status, body["error"])
        assert "not one of this node's" in body["detail"]

    async def test_an_index_of_another_epoch_is_410(self, client):
        """An index from another node or an earlier run: the numbers mean nothing here."""
        await register(client)
        epoch = registry_of(client).epoch
        ours = await client.get(f"/eureka/apps/delta?index=0&epoch={epoch}")
        theirs = await client.get("/eureka/apps/delta?index=0&epoch=0badc0de")
        assert (200, 410) == (ours.status, theirs.status)

    async def test_an_index_the_journal_forgot_is_410(self, client, clock):
        await register(client)
        await clock.advance(200)  # past the 180 s retention
        await register(client, iid="i-2")
        response = await client.get("/eureka/apps/delta?index=0")
        body = await response.json()
        assert (410, "index_expired") == (response.status, body["error"])
        assert "no longer kept" in body["detail"]

    async def test_shutdown_answers_waiting_polls(self, client):
        poll = asyncio.ensure_future(client.get("/eureka/apps/delta?index=0&wait=60s"))
        await settle()
        client.app[FEED].close()
        assert 200 == (await asyncio.wait_for(poll, 5)).status


def index(event: dict[str, Any]) -> str:
    """The index part of an event's id (index@epoch)."""
    return str(event["id"]).partition("@")[0]


class TestWatchStream:
    async def open(self, client, **headers: str) -> ClientResponse:
        response = await client.get("/eureka/watch", headers=headers)
        assert 200 == response.status
        assert response.headers["Content-Type"].startswith("text/event-stream")
        return response

    async def test_every_change_arrives_in_order(self, client):
        stream = await self.open(client)
        hello = await next_event(stream)
        epoch = registry_of(client).epoch
        assert ("watching", f"0@{epoch}", {"index": 0, "epoch": epoch}) == (
            hello["event"],
            hello["id"],
            hello["data"],
        )
        await register(client)
        await client.put("/eureka/apps/ORDERS/i-1")  # a heartbeat changes nothing: no event
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        await client.delete("/eureka/apps/ORDERS/i-1/status")
        await client.delete("/eureka/apps/ORDERS/i-1")
        events = [await next_event(stream) for _ in range(4)]
        assert [
            ("1", "ADDED", "UP"),
            ("2", "MODIFIED", "OUT_OF_SERVICE"),
            ("3", "MODIFIED", "UNKNOWN"),
            ("4", "DELETED", "UNKNOWN"),
        ] == [(index(e), e["event"], e["data"]["instance"]["status"]) for e in events]
        assert {("ORDERS", "i-1")} == {(e["data"]["app"], e["data"]["instanceId"]) for e in events}
        stream.close()

    async def test_resumes_after_last_event_id(self, client):
        for n in range(5):
            await register(client, iid=f"i-{n}")
        stream = await self.open(client, **{"Last-Event-ID": "3"})
        assert "3" == index(await next_event(stream))
        assert ["4", "5"] == [index(await next_event(stream)) for _ in range(2)]
        stream.close()

    async def test_resumes_after_an_id_it_sent(self, client):
        """An EventSource gives back the id as it got it: index@epoch."""
        for n in range(3):
            await register(client, iid=f"i-{n}")
        epoch = registry_of(client).epoch
        stream = await self.open(client, **{"Last-Event-ID": f"2@{epoch}"})
        await next_event(stream)
        assert f"3@{epoch}" == (await next_event(stream))["id"]
        stream.close()

    async def test_an_id_of_another_epoch_is_reset_to_now(self, client):
        """A stream resumed against another node (or after a restart) is told to re-fetch; the
        reset's id is the current index, so a client that ignores it is not reset forever."""
        for n in range(3):
            await register(client, iid=f"i-{n}")
        stream = await self.open(client, **{"Last-Event-ID": "2@0badc0de"})
        reset = await next_event(stream)
        epoch = registry_of(client).epoch
        assert ("reset", f"3@{epoch}") == (reset["event"], reset["id"])
        assert b"" == await asyncio.wait_for(stream.content.read(), 5)

    async def test_index_parameter_resumes_too(self, client):
        for n in range(3):
            await register(client, iid=f"i-{n}")
        response = await client.get("/eureka/watch?index=2")
        assert "watching" == (await next_event(response))["event"]
        assert "3" == index(await next_event(response))
        response.close()

    async def test_a_client_behind_the_journal_is_told_to_refetch(self, client, clock):
        await register(client)
        await clock.advance(200)
        await register(client, iid="i-2")
        stream = await self.open(client, **{"Last-Event-ID": "0"})
        reset = await next_event(stream)
        assert ("reset", "index_expired", 3) == (  # i-1 added, evicted; i-2 added
            reset["event"],
            reset["data"]["error"],
            reset["data"]["index"],
        )
        assert b"" == await asyncio.wait_for(stream.content.read(), 5)  # the stream ended

    async def test_watchers_are_counted_until_they_go(self, client):
        stream = await self.open(client)
        await next_event(stream)
        assert 1 == client.app[FEED].watchers
        stream.close()
        await register(client)  # the next write finds the client gone
        await eventually(lambda: client.app[FEED].watchers, lambda n: n == 0, what="gone")

    async def test_idle_streams_get_keepalive_comments(self, client, clock):
        stream = await self.open(client)
        await next_event(stream)
        await settle()
        await clock.advance(15)
        assert ": keepalive" == (await next_event(stream))["comment"]
        stream.close()

    async def test_a_bad_last_event_id_is_400(self, client):
        response = await client.get("/eureka/watch", headers={"Last-Event-ID": "x"})
        assert (400, "Last-Event-ID") == (response.status, (await response.json())["field"])

    async def test_hundreds_of_watchers_all_see_a_change(self, client):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            streams = [await session.get(client.make_url("/eureka/watch")) for _ in range(300)]
            for stream in streams:
                await next_event(stream)
            assert 300 == client.app[FEED].watchers
            await register(client)
            events = await asyncio.gather(*(next_event(stream) for stream in streams))
            assert {("1", "ADDED")} == {(index(e), e["event"]) for e in events}
            for stream in streams:
                stream.close()

    async def test_caught_up_streams_are_written_by_the_fan_out(self, client):
        """Streams that have everything are parked: a change is one frame written to each,
        not a wake-up of every stream's handler."""
        streams = [await self.open(client) for _ in range(3)]
        for stream in streams:
            await next_event(stream)
        fanout = client.app[FEED].fanout
        await eventually(lambda: len(fanout) == 3)
        await register(client)
        events = [await next_event(stream) for stream in streams]
        assert (1, {("1", "ADDED")}) == (fanout.frames, {(index(e), e["event"]) for e in events})
        assert 3 == len(fanout)
        assert 1 == (await scrape(client))[("registry_watch_fanout_seconds_count", ())]

    async def test_a_burst_too_large_to_fan_out_still_arrives_whole_and_in_order(self, client):
        """Changes whose events outgrow a frame (a mass eviction) are sent by each stream's
        handler, paced; the streams then go back to the fan-out."""
        streams = [await self.open(client) for _ in range(2)]
        for stream in streams:
            await next_event(stream)
        fanout = client.app[FEED].fanout
        await eventually(lambda: len(fanout) == 2)
        registry = registry_of(client)
        blob = {"blob": "x" * 4096}
        count = fanout_module.MAX_FRAME // 4096 + 5
        for k in range(count):  # in one turn of the loop, as a sweep makes them
            registry.register(make(f"i-{k}", metadata=blob), now_ms=T0)
        for stream in streams:
            seen = [index(await next_event(stream)) for _ in range(count)]
            assert [str(k) for k in range(1, count + 1)] == seen
        assert 0 == fanout.frames
        await eventually(lambda: len(fanout) == 2)
        await register(client, iid="late")
        assert [str(count + 1)] * 2 == [index(await next_event(s)) for s in streams]
        assert 1 == fanout.frames

    async def test_an_http_1_0_stream_gets_events_without_chunks(self, client):
        """HTTP/1.0 has no chunked bodies: the fan-out writes the events as they are."""
        reader, writer = await asyncio.open_connection(client.host, client.port)
        writer.write(b"GET /eureka/watch HTTP/1.0\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"event: watching\n"), 5)
        assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
        await asyncio.wait_for(reader.readuntil(b"\n\n"), 5)
        await eventually(lambda: len(client.app[FEED].fanout) == 1)
        await register(client)
        event = await asyncio.wait_for(reader.readuntil(b"\n\n"), 5)
        assert event.startswith(b"id: 1@") and b"event: ADDED\n" in event
        writer.close()

    async def test_shutdown_ends_the_streams(self, client):
        stream = await self.open(client)
        await next_event(stream)
        client.app[FEED].close()
        await settle()
        assert b"" == await asyncio.wait_for(stream.content.read(), 5)


class TestReadOnlyLayerOverHttp:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(
            reads__use_read_only_response_cache=True, reads__response_cache_update_interval=30
        )

    async def test_writes_show_after_the_refresh(self, client, clock):
        await register(client)
        first = await fetch_json(client, "/eureka/apps")
        await register(client, iid="i-2")
        assert first == await fetch_json(client, "/eureka/apps")
        await clock.advance(30)
        doc = await fetch_json(client, "/eureka/apps")
        assert 2 == len(doc["applications"]["application"][0]["instance"])


class TestWatchSetting:
    @pytest.mark.parametrize(
        ("settings", "expected"),
        [
            (Settings.of(reads__watch=True), (200, "text/event-stream")),
            (Settings.of(reads__watch=False), (403, "application/json")),
        ],
    )
    async def test_the_watch_setting_turns_the_stream_on_and_off(self, client, expected):
        """The same request streams with watch on and is refused with watch off."""
        response = await client.get("/eureka/watch")
        assert expected == (response.status, response.content_type)
        response.close()


class TestWatchTurnedOff:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(reads__watch=False)

    async def test_is_a_403_error_document_and_no_stream(self, client):
        """With watch off the answer is the registry's 403 error body, and no stream opens."""
        response = await client.get("/eureka/watch", headers={"Last-Event-ID": "0"})
        body = await asyncio.wait_for(response.json(), 5)
        assert (403, "not_served") == (response.status, body["error"])
        assert "watch = false" in body["detail"]
        assert "text/event-stream" != response.content_type
        assert 0 == client.app[FEED].watchers


class TestWatchHashcode:
    async def open(self, client, path: str = "/eureka/watch") -> ClientResponse:
        response = await client.get(path)
        assert (200, "watching") == (response.status, (await next_event(response))["event"])
        return response

    async def test_each_event_carries_the_hash_right_after_its_change(self, client):
        """Each event carries the registry's apps__hashcode as its change left it."""
        stream = await self.open(client)
        await register(client, iid="i-1")
        await register(client, iid="i-2")
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE")
        await client.delete("/eureka/apps/ORDERS/i-2")
        events = [await next_event(stream) for _ in range(4)]
        assert [
            ("1", "ADDED", "UP_1_"),
            ("2", "ADDED", "UP_2_"),
            ("3", "MODIFIED", "OUT_OF_SERVICE_1_UP_1_"),
            ("4", "DELETED", "OUT_OF_SERVICE_1_"),
        ] == [(index(e), e["event"], e["data"]["hashcode"]) for e in events]
        stream.close()

    async def test_a_burst_of_changes_keeps_each_change_its_own_hash(self, client, clock):
        """Changes made in one loop turn, before the stream sends any, each keep their hash."""
        for n in range(3):
            await register(client, iid=f"i-{n}")
        stream = await self.open(client)
        registry = registry_of(client)
        for n in range(3):  # no await between them: the stream encodes them all afterwards
            registry.cancel("ORDERS", f"i-{n}", now_ms=clock.wall_ms())
        events = [await next_event(stream) for _ in range(3)]
        assert [("4", "UP_2_"), ("5", "UP_1_"), ("6", "")] == [
            (index(e), e["data"]["hashcode"]) for e in events
        ]
        stream.close()

    async def test_the_last_event_hash_is_the_one_a_full_fetch_shows(self, client):
        """A client that applied every event compares the same hash GET apps gives."""
        stream = await self.open(client)
        await register(client, iid="i-1")
        await register(client, "PAYMENTS", "p-1", status="STARTING")
        await next_event(stream)
        last = await next_event(stream)
        doc = await fetch_json(client, "/eureka/apps")
        assert ("STARTING_1_UP_1_", "STARTING_1_UP_1_") == (
            last["data"]["hashcode"],
            doc["applications"]["apps__hashcode"],
        )
        stream.close()

    async def test_a_change_made_before_any_stream_opened_has_no_hashcode(self, client):
        """Resumed with ?index=, a change made while nobody watched comes without a hash."""
        await register(client, iid="i-1")
        stream = await self.open(client, "/eureka/watch?index=0")
        early = await next_event(stream)
        await register(client, iid="i-2")
        late = await next_event(stream)
        assert [("1", None), ("2", "UP_2_")] == [
            (index(e), e["data"].get("hashcode")) for e in (early, late)
        ]
        assert {"index", "action", "app", "instanceId", "instance"} == set(early["data"])
        stream.close()

    async def test_a_stream_resumed_later_gets_the_hashes_noted_while_one_was_open(self, client):
        """The hash belongs to the change: a second stream resuming past it sends it too."""
        await register(client, iid="i-1")
        first = await self.open(client)
        await register(client, iid="i-2")
        await next_event(first)
        second = await self.open(client, "/eureka/watch?index=0")
        events = [await next_event(second) for _ in range(2)]
        assert [("1", None), ("2", "UP_2_")] == [
            (index(e), e["data"].get("hashcode")) for e in events
        ]
        first.close()
        second.close()

    async def test_changes_after_the_last_stream_closed_have_no_hashcode(self, client):
        """Once every stream is gone the hash is no longer noted."""
        stream = await self.open(client)
        stream.close()
        await register(client, iid="i-1")  # this write finds the client gone
        await eventually(lambda: client.app[FEED].watchers, lambda n: n == 0, what="no watcher")
        await register(client, iid="i-2")
        resumed = await self.open(client, "/eureka/watch?index=1")
        event = await next_event(resumed)
        assert ("2", None) == (index(event), event["data"].get("hashcode"))
        resumed.close()
