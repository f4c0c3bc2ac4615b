"""Stateful property: the cache never serves what a fresh build would not, and deltas add up.

After any sequence of registrations (in applications whose names differ only by case too),
heartbeats (some with a differing lastDirtyTimestamp), cancels, overrides, metadata updates,
time passing, evictions (all at once, or by the capped random sweep) and the catalog's refresh
of old items: every cached document, put together from kept blocks, equals the same document
encoded whole from the registry (tests/reference.py), plain and gzip, with the hash
counted afresh (heartbeats do not rebuild documents, so `lastRenewalTimestamp` is the one field
allowed to lag); a client that applies each delta to its copy computes the delta's own
`apps__hashcode`; so does a long-polling client that asks for the changes after the index it
last saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import random
import re
from typing import Any

import orjson
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from registry.codec import Format
from registry.common.clock import FakeClock
from registry.common.hashcode import reconcile_hash
from registry.common.tasks import Pacer
from registry.core.conflicts import StaleReplica
from registry.core.eviction import Evictor
from registry.core.model import InstanceStatus
from registry.core.preservation import SelfPreservation
from registry.core.registry import Registry
from registry.errors import UnknownInstance
from registry.reads import cache, payloads
from registry.reads.cache import ResponseCache
from registry.reads.catalog import Catalog
from registry.reads.journal import DeltaJournal
from tests import reference
from tests.factories import T0, make
from tests.helpers import evict_expired

APPS = st.sampled_from(["ORDERS", "PAYMENTS", "Orders"])
MAX_AGE = 30
IDS = st.sampled_from(["a", "b", "c"])
VIPS = st.sampled_from(["blue", "green", "blue,green"])
STATUSES = st.sampled_from(list(InstanceStatus))
_RENEWAL_JSON = re.compile(rb'"lastRenewalTimestamp":\d+')
_RENEWAL_XML = re.compile(rb"<lastRenewalTimestamp>\d+</lastRenewalTimestamp>")


def without_renewals(body: bytes) -> bytes:
    return _RENEWAL_XML.sub(b"", _RENEWAL_JSON.sub(b"", body))


def applied(delta: dict[str, Any], copy: dict[str, dict[str, str]]) -> str:
    """Apply a delta document to a client's copy (app -> id -> status), as a Eureka client
    does (contract 9.3); the reconcile hash of the copy after it."""
    for application in delta["application"]:
        for instance in application["instance"]:
            held = copy.setdefault(application["name"], {})
            if instance["actionType"] == "DELETED":
                held.pop(instance["instanceId"], None)
            else:
                held[instance["instanceId"]] = instance["status"]
    return reconcile_hash(InstanceStatus(s) for held in copy.values() for s in held.values())


class CachedRegistry(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.dirty = T0
        self.registry = Registry()
        self.journal = DeltaJournal(retention_ms=180_000)
        self.cache = ResponseCache()
        self.catalog = Catalog(self.registry, max_age=MAX_AGE)
        for part in (self.journal, self.catalog, self.cache):
            self.registry.subscribe(part)
        self.client: dict[str, dict[str, str]] = {}  # app -> id -> status, kept by deltas
        self.poller: dict[str, dict[str, str]] = {}  # the same, kept by long-poll answers
        self.poller_index = 0

    # Commands ------------------------------------------------------------------------------

    @rule(app=APPS, iid=IDS, status=STATUSES, vip=VIPS, newer=st.booleans())
    def register(self, app: str, iid: str, status: InstanceStatus, vip: str, newer: bool) -> None:
        self.dirty += 1 if newer else 0
        instance = make(iid, app=app, status=status, dirty=self.dirty, vip_address=vip)
        self.registry.register(instance, now_ms=self.now)

    @rule(app=APPS, iid=IDS, dirty_offset=st.none() | st.integers(-1, 1), replication=st.booleans())
    def renew(self, app: str, iid: str, dirty_offset: int | None, replication: bool) -> None:
        """A heartbeat, sometimes with a lastDirtyTimestamp older or newer than ours."""
        dirty = None if dirty_offset is None else self.dirty + dirty_offset
        with contextlib.suppress(UnknownInstance, StaleReplica):
            self.registry.renew(
                app, iid, now_ms=self.now, is_replication=replication, last_dirty_ms=dirty
            )

    @rule(app=APPS, iid=IDS)
    def cancel(self, app: str, iid: str) -> None:
        with contextlib.suppress(UnknownInstance):
            self.registry.cancel(app, iid, now_ms=self.now)

    @rule(app=APPS, iid=IDS, status=STATUSES)
    def override(self, app: str, iid: str, status: InstanceStatus) -> None:
        with contextlib.suppress(UnknownInstance):
            self.registry.set_status_override(app, iid, status, now_ms=self.now)

    @rule(app=APPS, iid=IDS, status=st.none() | STATUSES)
    def delete_override(self, app: str, iid: str, status: InstanceStatus | None) -> None:
        with contextlib.suppress(UnknownInstance):
            self.registry.delete_status_override(
                app, iid, now_ms=self.now, status=status or InstanceStatus.UNKNOWN
            )

    @rule(app=APPS, iid=IDS, value=st.sampled_from(["1", "2"]))
    def metadata(self, app: str, iid: str, value: str) -> None:
        with contextlib.suppress(UnknownInstance):
            self.registry.update_metadata(app, iid, {"k": value}, now_ms=self.now)

    @rule(seconds=st.integers(1, 100))
    def time_passes_and_eviction_runs(self, seconds: int) -> None:
        self.now += seconds * 1000
        evict_expired(self.registry, now_ms=self.now)

    @rule(seconds=st.integers(1, 100), seed=st.integers(0, 3))
    def time_passes_and_a_capped_sweep_runs(self, seconds: int, seed: int) -> None:
        self.now += seconds * 1000
        clock = FakeClock(start_ms=self.now)
        evictor = Evictor(
            self.registry,
            clock,
            SelfPreservation(enabled=False),
            interval=5,
            rng=random.Random(seed),
        )
        asyncio.run(evictor.sweep())

    @rule(seconds=st.integers(1, 40))
    def time_passes_and_old_items_are_encoded_again(self, seconds: int) -> None:
        self.now += seconds * 1000
        asyncio.run(
            self.catalog.refresh(
                now=self.monotonic, refreshed=self.cache.drop_application, pacer=Pacer()
            )
        )

    # Reads ---------------------------------------------------------------------------------

    @property
    def monotonic(self) -> float:
        return (self.now - T0) / 1000

    def served(self, key: tuple[Any, ...], build: Any) -> bytes:
        if key[0] == cache.DELTA and self.journal.purge(now_ms=self.now):
            self.cache.drop_delta()  # as the delta handler does before reading
        document = self.cache.get(key, build, now=self.monotonic)
        assert document is not None
        gzipped = asyncio.run(document.gzipped())
        assert document.body == gzip.decompress(b"".join(gzipped))
        return document.body

    @invariant()
    def cached_documents_match_whole_ones(self) -> None:
        r, j, c, now = self.registry, self.journal, self.catalog, self.monotonic
        for fmt in Format:
            checks = {
                (cache.APPS, fmt): (
                    lambda f=fmt: payloads.full_registry(r, c, f, now=now),
                    lambda f=fmt: reference.full(r, f),
                ),
                (cache.DELTA, fmt): (
                    lambda f=fmt: payloads.delta(r, j, f, now_ms=self.now),
                    lambda f=fmt: reference.delta(r, j, f, now_ms=self.now),
                ),
            }
            for vip in ("blue", "green", "nobody"):
                for secure in (False, True):
                    checks[(cache.VIP, secure, vip, fmt)] = (
                        lambda v=vip, s=secure, f=fmt: (
                            payloads.vip(r, c, v, f, secure=s) or payloads.no_vip(r, f)
                        ),
                        lambda v=vip, s=secure, f=fmt: reference.vip(r, v, f, secure=s),
                    )
            for name, _ in r.applications():
                checks[(cache.APP, name, fmt)] = (
                    lambda n=name, f=fmt: payloads.application(r, c, n, f, now=now),
                    lambda n=name, f=fmt: reference.application(r, n, f),
                )
            for key, (build, whole) in checks.items():
                assert without_renewals(whole()) == without_renewals(self.served(key, build))

    @invariant()
    def a_client_applying_deltas_agrees_with_the_hash(self) -> None:
        """The delta's hash equals the hash of a copy kept up to date by deltas alone."""
        build = lambda: payloads.delta(self.registry, self.journal, Format.JSON, now_ms=self.now)  # noqa: E731
        doc = orjson.loads(self.served((cache.DELTA, Format.JSON), build))["applications"]
        assert doc["apps__hashcode"] == applied(doc, self.client)
        assert self.registry.reconcile_hash() == doc["apps__hashcode"]

    @invariant()
    def a_long_polling_client_agrees_with_the_hash(self) -> None:
        """Applying the changes after the index it last saw keeps a copy in step, or the
        journal forgot them and the client starts again from a full fetch."""
        if self.journal.purge(now_ms=self.now):
            self.cache.drop_delta()
        changed = self.journal.since(self.poller_index)
        if changed is None:  # 410 index_expired: start again from a full fetch
            self.poller = {
                name: {lease.instance.instance_id: lease.instance.status.value for lease in leases}
                for name, leases in self.registry.applications()
            }
            self.poller_index = self.registry.index
            return
        key = (cache.SINCE, self.poller_index, Format.JSON)
        build = lambda: payloads.changes(self.registry, changed, Format.JSON)  # noqa: E731
        body = self.served(key, build)
        events = self.journal.after(self.poller_index) or []
        assert reference.changes(self.registry, events, Format.JSON) == body
        doc = orjson.loads(body)["applications"]
        self.poller_index = int(doc["versions__delta"])
        assert doc["apps__hashcode"] == applied(doc, self.poller)
        assert self.registry.reconcile_hash() == doc["apps__hashcode"]
        assert self.registry.index == self.poller_index


TestCachedRegistry = CachedRegistry.TestCase
TestCachedRegistry.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)
