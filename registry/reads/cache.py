"""Fetch documents, kept until a change touches what they hold (contract 10, 15).

Keys name what a document depends on: the whole registry (`apps`), the delta, the changes
since an index (`since`, for long-polls), one application, or a VIP. A change drops the
whole-registry and delta documents, its own application's, and those of the VIPs the instance
had or has. Heartbeats change nothing here, so a cached document's `lastRenewalTimestamp`
values are as of the last change (and `max_age` old at most); every status, registration and
cancel is visible on the next read.

Documents are put together synchronously on a miss, so that cannot interleave with a change,
and concurrent readers of a missing document get one. They are made of blocks kept by the
catalog and the journal (registry/reads/encoded.py), so a miss after a change costs what the change
touched; a document's gzip form is made once, from its blocks' segments.

Eureka's read-only layer is available (`read_only=True`): reads are then served from a copy
that `refresh` brings up to date, every 30 s in Eureka, so a write takes that long to show.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable

from registry.core.model import ChangeEvent, InstanceInfo
from registry.core.subscriber import Subscriber
from registry.reads.encoded import Document

Key = tuple[Hashable, ...]

APPS = "apps"
DELTA = "delta"
SINCE = "since"
APP = "app"
VIP = "vip"

# Long-poll answers kept at once. Pollers mostly wait at the same index, so a change is answered
# from one build; answers for every index ever asked would hold the journal many times over.
MAX_SINCE = 8


class ResponseCache(Subscriber):
    def __init__(self, *, max_age: float | None = None, read_only: bool = False) -> None:
        """`max_age` (seconds) bounds how old a document can be, change or not: heartbeats
        do not rebuild documents, so it also bounds the age of their lastRenewalTimestamps."""
        self._max_age = max_age
        # One entry per key, so a cached read costs a single lookup.
        self._entries: dict[Key, Document] = {}
        # Which keys a change can touch, so dropping them never scans the whole cache.
        self._global: set[Key] = set()  # registry and delta payloads: every change
        self._by_app: dict[str, set[Key]] = {}  # per-application payloads
        self._by_vip: dict[str, set[Key]] = {}  # VIP payloads (both kinds), by VIP name
        self._since: dict[Key, None] = {}  # long-poll answers kept, oldest first
        self._frozen: dict[Key, Document] | None = {} if read_only else None
        self.hits = 0
        self.misses = 0

    def get(
        self, key: Key, build: Callable[[], Document | None], *, now: float = 0.0
    ) -> Document | None:
        """The document for `key`, built by `build` if it is not cached (or too old at `now`,
        in monotonic seconds). None when `build` finds nothing to show, which is not kept:
        names clients make up (VIPs no instance has) cannot fill memory."""
        frozen = self._frozen if key[0] != SINCE else None
        if frozen is not None and key in frozen:
            self.hits += 1
            return frozen[key]
        document = self._entries.get(key)
        if document is not None:
            if self._max_age is None or now - document.built_at <= self._max_age:
                self.hits += 1
                return document
            self._drop((key,))
        self.misses += 1
        document = build()
        if document is not None:
            document.built_at = now
            self._entries[key] = document
            self._index(key)
            if frozen is not None:
                frozen[key] = document
        return document

    def holds(self, key: Key, *, now: float = 0.0) -> bool:
        """Whether `get` would answer `key` without building."""
        if self._frozen is not None and key[0] != SINCE and key in self._frozen:
            return True
        document = self._entries.get(key)
        return document is not None and (
            self._max_age is None or now - document.built_at <= self._max_age
        )

    def _index(self, key: Key) -> None:
        if key[0] == APP:
            self._by_app.setdefault(str(key[1]), set()).add(key)
        elif key[0] == VIP:
            self._by_vip.setdefault(str(key[2]), set()).add(key)
        else:
            self._global.add(key)
        if key[0] == SINCE:
            self._since[key] = None
            if len(self._since) > MAX_SINCE:
                oldest = next(iter(self._since))
                del self._since[oldest]
                self._drop((oldest,))

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: drop every payload the change makes stale."""
        self._drop(self._global)
        self._global = set()
        self._since.clear()
        instance = event.lease.instance
        self._drop(self._by_app.pop(instance.app, ()))
        for name in _vip_names(instance) | _vip_names(event.previous):
            self._drop(self._by_vip.pop(name, ()))

    def drop_application(self, app: str, vips: Collection[str]) -> None:
        """An application's instances were encoded anew (the catalog's refresh): drop the
        documents that show them, but not the delta's, which show changes as they were."""
        stale = {key for key in self._global if key[0] == APPS}
        self._drop(stale)
        self._global -= stale
        self._drop(self._by_app.pop(app, ()))
        for name in vips:
            self._drop(self._by_vip.pop(name, ()))

    def on_load(self, _registry: object) -> None:
        """Drop every document (the registry was loaded in bulk)."""
        self._entries.clear()
        self._global, self._by_app, self._by_vip = set(), {}, {}
        self._since.clear()
        if self._frozen is not None:
            self._frozen.clear()

    def drop_delta(self) -> None:
        """The journal forgot old changes: delta payloads must be rebuilt."""
        stale = {key for key in self._global if key[0] in (DELTA, SINCE)}
        self._drop(stale)
        self._global -= stale
        self._since.clear()

    def refresh(self, now: float) -> None:
        """The read-only layer's timer: serve the current payloads from now on."""
        if self._frozen is None:
            return
        for key in list(self._frozen):
            current = self._entries.get(key)
            if current is None or (
                self._max_age is not None and now - current.built_at > self._max_age
            ):
                del self._frozen[key]  # rebuilt, and frozen again, by the next read
            else:
                self._frozen[key] = current

    def _drop(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


def _vip_names(instance: InstanceInfo | None) -> set[str]:
    if instance is None:
        return set()
    names = set()
    for address in (instance.vip_address, instance.secure_vip_address):
        if address:
            names.update(address.split(","))
    return names


class Recent:
    """Values kept `max_age` seconds by key, `size` at most (the oldest go first): for what
    changes every moment yet costs too much to make for every request (the status page)."""

    def __init__(self, *, max_age: float, size: int = 4) -> None:
        self._max_age = max_age
        self._size = size
        self._values: dict[Hashable, tuple[float, object]] = {}
        self.made = 0  # values put: made because none was fresh (the page's renders, in metrics)

    def get(self, key: Hashable, *, now: float) -> object | None:
        made = self._values.get(key)
        if made is None or now - made[0] > self._max_age:
            return None
        return made[1]

    def put(self, key: Hashable, value: object, *, now: float) -> None:
        self.made += 1
        self._values.pop(key, None)
        self._values[key] = (now, value)
        while len(self._values) > self._size:
            del self._values[next(iter(self._values))]
