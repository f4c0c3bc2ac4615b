"""The response cache: built once, dropped exactly when a change touches it, gzipped once."""

from __future__ import annotations

import gzip

import pytest

from registry.appkeys import CACHE
from registry.core.registry import Registry
from registry.reads.cache import APP, APPS, DELTA, MAX_SINCE, SINCE, VIP, ResponseCache
from registry.reads.encoded import Document
from tests.factories import T0, make
from tests.helpers import JSON, register


@pytest.fixture
def cache() -> ResponseCache:
    return ResponseCache()


class TestGet:
    def test_builds_once_then_hits(self, cache):
        """A payload is built on the first read only."""
        builds = []
        build = lambda: builds.append(1) or Document.of(b"x")  # noqa: E731
        for _ in range(3):
            assert b"x" == cache.get((APPS, "json"), build).body
        assert (1, 1, 2) == (len(builds), cache.misses, cache.hits)


class TestInvalidate:
    def test_change_drops_what_it_touches_and_keeps_other_apps(self, cache):
        """A change in ORDERS drops the registry, delta, ORDERS and its VIP's payloads; not
        PAYMENTS' or another VIP's."""
        registry = Registry()
        registry.subscribe(cache)
        keys = [
            (APPS,),
            (DELTA,),
            (SINCE, 3),
            (APP, "ORDERS"),
            (APP, "PAYMENTS"),
            (VIP, False, "orders"),
            (VIP, True, "orders"),
            (VIP, False, "payments"),
        ]
        for key in keys:
            cache.get(key, lambda: Document.of(b"old"))
        registry.register(make(app="ORDERS", vip_address="orders"), now_ms=T0)
        assert [(APP, "PAYMENTS"), (VIP, False, "payments")] == list(cache._entries)

    def test_an_instance_leaving_a_vip_drops_the_old_and_the_new_vip(self, cache):
        """Re-registered under another VIP: both VIP payloads are stale."""
        registry = Registry()
        registry.register(make(vip_address="blue,red"), now_ms=T0)
        registry.subscribe(cache)
        for vip in ("blue", "red", "green", "yellow"):
            cache.get((VIP, False, vip), lambda: Document.of(b"old"))
        registry.register(make(vip_address="green"), now_ms=T0 + 1)
        assert [(VIP, False, "yellow")] == list(cache._entries)

    def test_heartbeats_drop_nothing(self, cache):
        """A renewal is not a change: cached payloads stay."""
        registry = Registry()
        registry.register(make(), now_ms=T0)
        registry.subscribe(cache)
        cache.get((APPS,), lambda: Document.of(b"payload"))
        registry.renew("ORDERS", "i-1", now_ms=T0 + 1)
        assert 1 == len(cache)

    def test_drop_delta_keeps_the_rest(self, cache):
        """Forgetting old changes drops only delta payloads."""
        cache.get((APPS,), lambda: Document.of(b"a"))
        cache.get((DELTA,), lambda: Document.of(b"d"))
        cache.drop_delta()
        assert [(APPS,)] == list(cache._entries)


class TestMaxAge:
    def test_documents_are_rebuilt_after_max_age(self):
        """Even without a change, a document older than max_age is built again."""
        cache = ResponseCache(max_age=30)
        builds = []
        for now in (0.0, 29.0, 31.0):
            cache.get((APPS,), lambda: builds.append(1) or Document.of(b"x"), now=now)
        assert 2 == len(builds)

    def test_nothing_to_show_is_not_stored(self):
        """A build that finds nothing (a VIP no instance has) is not cached."""
        cache = ResponseCache()
        assert None is cache.get((VIP, False, "nobody"), lambda: None)
        assert 0 == len(cache)


class TestReadOnlyLayer:
    def test_reads_lag_writes_until_the_refresh(self):
        """Eureka's layer on request: a change shows only after the next refresh."""
        cache = ResponseCache(read_only=True)
        registry = Registry()
        registry.subscribe(cache)
        assert b"v1" == cache.get((APPS,), lambda: Document.of(b"v1", 1)).body
        registry.register(make(), now_ms=T0)
        assert b"v1" == cache.get((APPS,), lambda: Document.of(b"v2", 2)).body
        cache.refresh(now=0.0)
        fresh = cache.get((APPS,), lambda: Document.of(b"v2", 2))
        assert (b"v2", 2) == (fresh.body, fresh.index)
        assert b"v2" == cache.get((APPS,), lambda: Document.of(b"v3", 3)).body

    def test_documents_past_max_age_are_rebuilt_at_the_refresh(self):
        """Heartbeats change no document: max_age still bounds how old one can be."""
        cache = ResponseCache(read_only=True, max_age=30)
        cache.get((APPS,), lambda: Document.of(b"v1"), now=0.0)
        cache.refresh(now=20.0)
        assert b"v1" == cache.get((APPS,), lambda: Document.of(b"v2"), now=25.0).body
        cache.refresh(now=31.0)
        assert b"v2" == cache.get((APPS,), lambda: Document.of(b"v2"), now=32.0).body

    def test_only_a_few_long_poll_answers_are_kept(self):
        """Answers for many different indexes do not pile up between changes."""
        cache = ResponseCache()
        for index in range(100):
            cache.get((SINCE, index), lambda: Document.of(b"x" * 1000))
        assert MAX_SINCE == len(cache)
        assert [(SINCE, i) for i in range(100 - MAX_SINCE, 100)] == list(cache._entries)

    def test_long_poll_payloads_bypass_it(self):
        cache = ResponseCache(read_only=True)
        registry = Registry()
        registry.subscribe(cache)
        cache.get((SINCE, 0), lambda: Document.of(b"v1"))
        registry.register(make(), now_ms=T0)
        assert b"v2" == cache.get((SINCE, 0), lambda: Document.of(b"v2")).body


class TestOverHttp:
    async def test_read_after_write_sees_the_write(self, client):
        """Every registration shows in the very next full fetch, cached or not."""
        for n in range(3):
            await register(client, iid=f"i-{n}")
            doc = await (await client.get("/eureka/apps", headers=JSON)).json()
            assert n + 1 == len(doc["applications"]["application"][0]["instance"])

    async def test_gzip_and_plain_carry_the_same_document(self, client):
        """The cached gzip form inflates to the cached plain form."""
        await register(client)
        plain = await (await client.get("/eureka/apps", headers=JSON)).read()
        response = await client.get(
            "/eureka/apps", headers={"Accept-Encoding": "gzip", **JSON}, auto_decompress=False
        )
        assert "gzip" == response.headers["Content-Encoding"]
        assert plain == gzip.decompress(await response.read())

    async def test_unknown_vips_are_answered_but_not_cached(self, client):
        """Made-up VIP names get their empty answer and leave nothing behind."""
        for n in range(20):
            response = await client.get(f"/eureka/vips/made-up-{n}", headers=JSON)
            assert [] == (await response.json())["applications"]["application"]
        assert 0 == len(client.app[CACHE])

    async def test_vip_payload_follows_a_moved_instance(self, client):
        """Re-registering under another VIP updates both VIP answers."""
        await register(client, vipAddress="blue")
        assert 1 == len(
            (await (await client.get("/eureka/vips/blue", headers=JSON)).json())["applications"][
                "application"
            ]
        )
        await register(client, vipAddress="green")
        assert (
            []
            == (await (await client.get("/eureka/vips/blue", headers=JSON)).json())["applications"][
                "application"
            ]
        )
