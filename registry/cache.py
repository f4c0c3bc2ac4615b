"""Encoded fetch payloads, kept until a change touches what they hold.

Keys name what a payload depends on: the whole registry (`apps`), the delta, one application,
or a VIP. A change drops the whole-registry and delta payloads, its own application's, and
every VIP payload (a re-registration may move an instance between VIPs). Heartbeats change
nothing here, so a cached payload's `lastRenewalTimestamp` values are as of the last change;
every status, registration and cancel is visible on the next read.

Payloads are built synchronously from the registry on a miss, so a build cannot interleave
with a change. Gzip, the slow part for a large registry, runs in a thread, once per payload
however many clients ask at the same time.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Callable, Hashable, Iterable

from registry.model import ChangeEvent

Key = tuple[Hashable, ...]

APPS = "apps"
DELTA = "delta"
APP = "app"
VIP = "vip"

GZIP_LEVEL = 6


class _Entry:
    """One cached payload: its bytes, when they were built, and their gzip form once made."""

    __slots__ = ("body", "built_at", "gzipped")

    def __init__(self, body: bytes, built_at: float) -> None:
        self.body = body
        self.built_at = built_at
        self.gzipped: bytes | None = None


class ResponseCache:
    def __init__(self, *, max_age: float | None = None) -> None:
        """`max_age` (seconds) bounds how old a document can be, change or not: heartbeats
        do not rebuild documents, so it also bounds the age of their lastRenewalTimestamps."""
        self._max_age = max_age
        # One entry per key, so a cached read costs a single lookup.
        self._entries: dict[Key, _Entry] = {}
        # Which keys a change can touch, so dropping them never scans the whole cache.
        self._shared: set[Key] = set()  # registry, delta and VIP payloads: every change
        self._by_app: dict[str, set[Key]] = {}  # per-application payloads: that app's changes
        self._compressing: dict[Key, tuple[bytes, asyncio.Future[bytes]]] = {}
        self.hits = 0
        self.misses = 0

    def get(
        self,
        key: Key,
        build: Callable[[], bytes],
        *,
        now: float = 0.0,
        keep: Callable[[], bool] | None = None,
    ) -> bytes:
        """The payload for `key`, built by `build` if it is not cached (or too old at `now`,
        in monotonic seconds). A fresh build is kept unless `keep` says otherwise."""
        entry = self._entries.get(key)
        if entry is not None:
            if self._max_age is None or now - entry.built_at <= self._max_age:
                self.hits += 1
                return entry.body
            self._drop((key,))
        self.misses += 1
        body = build()
        if keep is None or keep():
            self._entries[key] = _Entry(body, now)
            if key[0] == APP:
                self._by_app.setdefault(str(key[1]), set()).add(key)
            else:
                self._shared.add(key)
        return body

    def compressed(self, key: Key, body: bytes) -> bytes | None:
        """`body`'s gzip form if it is cached already: the common case, without awaiting."""
        entry = self._entries.get(key)
        return entry.gzipped if entry is not None and entry.body is body else None

    async def gzipped(self, key: Key, body: bytes) -> bytes:
        """`body` (the payload for `key`) gzip-compressed, compressed once and kept."""
        cached = self.compressed(key, body)
        if cached is not None:
            return cached
        in_flight = self._compressing.get(key)
        if in_flight is None or in_flight[0] is not body:
            task = asyncio.ensure_future(asyncio.to_thread(gzip.compress, body, GZIP_LEVEL))
            task.add_done_callback(lambda _: self._forget(key, task))
            in_flight = self._compressing[key] = (body, task)
        # Shielded: a waiting client that goes away must not cancel the others' compression.
        compressed = await asyncio.shield(in_flight[1])
        entry = self._entries.get(key)
        if entry is not None and entry.body is body:  # still current: keep it for the next client
            entry.gzipped = compressed
        return compressed

    def _forget(self, key: Key, task: asyncio.Future[bytes]) -> None:
        in_flight = self._compressing.get(key)
        if in_flight is not None and in_flight[1] is task:
            del self._compressing[key]

    def invalidate(self, event: ChangeEvent) -> None:
        """Registry listener: drop every payload the change makes stale."""
        self._drop(self._shared)
        self._shared = set()
        self._drop(self._by_app.pop(event.lease.instance.app, ()))

    def drop_delta(self) -> None:
        """The journal forgot old changes: delta payloads must be rebuilt."""
        stale = {key for key in self._shared if key[0] == DELTA}
        self._drop(stale)
        self._shared -= stale

    def _drop(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
