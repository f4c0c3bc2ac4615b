"""Removals that are remembered: a tombstone for every instance cancelled or evicted.

A removal is a fact about an instance as much as a registration is, and peers learn of both
late and out of order: a batch lost to a crash, a node that was down or cut off, a copy
restored from a store. So every path that could bring an instance back (a replicated
registration, a peer's 409 copy, start-up sync, anti-entropy, a late store) asks the one rule
below whether the copy it holds wins over the removal the registry remembers.

The rule. A removal records the lastDirtyTimestamp of the copy it removed (`dirty_ms`) and
when (`at_ms`, the remover's clock: a cancel's time; for an eviction, the last renewal the
evicting node saw, since "no renewal after that" is all an eviction knows).

- A different lastDirtyTimestamp decides: the newer one wins. Both come from the instance's
  own client, so skewed node clocks cannot mislead it: a client that registers again after a
  cancel has marked itself dirty later, and wins; a stale copy of what was removed loses.
- The same lastDirtyTimestamp: the copy wins only when it was renewed more than `margin_ms`
  after the removal, by the clocks of the nodes that saw each. Nodes whose clocks disagree by
  less than the margin never bring back a removed instance. Ties go to the removal, because a
  wrongly removed live instance heals itself (its next heartbeat is answered 404 and it
  registers again), while a wrongly kept dead one is served to clients until its lease runs
  out.

Tombstones are kept for `retention` after their time, then purged (a copy older than that has
an expired lease anyway, which no path adopts).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Tombstone:
    app: str
    instance_id: str
    dirty_ms: int  # the lastDirtyTimestamp of the copy removed
    at_ms: int  # when (see the module's docstring)
    # An eviction's, not a cancel's: for a peer, evidence its own eviction weighs, not an
    # order (core/preservation.py).
    expired: bool = False


def copy_wins(dirty_ms: int, renewed_ms: int, removal: Tombstone, margin_ms: int) -> bool:
    """Whether a copy (its lastDirtyTimestamp, its last renewal) wins over `removal`: a
    different lastDirtyTimestamp decides, the same one leaves it to the renewal's time."""
    return (dirty_ms, renewed_ms) > (removal.dirty_ms, removal.at_ms + margin_ms)


def newer(a: Tombstone, b: Tombstone) -> Tombstone:
    """Of two removals of one instance, the one that says more: the later lastDirtyTimestamp,
    then the later time."""
    return a if (a.dirty_ms, a.at_ms) >= (b.dirty_ms, b.at_ms) else b


class Tombstones:
    """The removals remembered, by application and instance id, purged at their retention."""

    def __init__(self, *, retention_ms: int, margin_ms: int) -> None:
        self.retention_ms = retention_ms
        self.margin_ms = margin_ms  # see the rule in the module's docstring
        self._apps: dict[str, dict[str, Tombstone]] = {}
        self._due: list[tuple[int, str, str]] = []  # (at_ms, app, id): a heap, oldest first
        self._count = 0
        self._touched: set[str] = set()  # applications whose removals changed (`touched`)

    def copy_wins(self, dirty_ms: int, renewed_ms: int, removal: Tombstone) -> bool:
        """Whether a copy (its lastDirtyTimestamp, its last renewal) wins over `removal`."""
        return copy_wins(dirty_ms, renewed_ms, removal, self.margin_ms)

    def get(self, app: str, instance_id: str) -> Tombstone | None:
        found = self._apps.get(app)
        return None if found is None else found.get(instance_id)

    def put(self, tombstone: Tombstone) -> Tombstone:
        """Remember `tombstone`, or keep the one held when it says more; the one kept."""
        held = self._apps.setdefault(tombstone.app, {})
        current = held.get(tombstone.instance_id)
        kept = tombstone if current is None else newer(tombstone, current)
        if kept is not current:
            if current is None:
                self._count += 1
            held[tombstone.instance_id] = kept
            self._touched.add(kept.app)
            heapq.heappush(self._due, (kept.at_ms, kept.app, kept.instance_id))
        return kept

    def lift(self, app: str, instance_id: str) -> Tombstone | None:
        """Forget the removal of an instance that is back (a copy won); the one forgotten."""
        held = self._apps.get(app)
        if held is None:
            return None
        gone = held.pop(instance_id, None)
        if gone is not None:
            self._count -= 1
            self._touched.add(app)
            if not held:
                del self._apps[app]
        return gone

    def purge(self, *, now_ms: int, limit: int | None = None) -> int:
        """Forget removals older than the retention (at most `limit`); how many went."""
        horizon, due, purged = now_ms - self.retention_ms, self._due, 0
        while due and due[0][0] < horizon and purged != limit:
            at_ms, app, iid = heapq.heappop(due)
            current = self.get(app, iid)
            if current is not None and current.at_ms == at_ms:  # not replaced by a newer one
                self.lift(app, iid)
                purged += 1
        return purged

    def touched(self) -> set[str]:
        """The applications whose removals changed since the last call (for the one reader
        that keeps something per application: the anti-entropy digests)."""
        touched, self._touched = self._touched, set()
        return touched

    def of(self, app: str) -> Collection[Tombstone]:
        return self._apps.get(app, {}).values()

    def application_names(self) -> Iterator[str]:
        return iter(self._apps)

    def __iter__(self) -> Iterator[Tombstone]:
        for held in self._apps.values():
            yield from held.values()

    def __len__(self) -> int:
        return self._count
