"""The registry's removals, and what peers say of instances, weighed against them: this node's
evictions (`evict`), a peer's removal (`bury`), its copy (`adopt`) and a renewal seen in its
registry (`renewed_elsewhere`).

A part of `Registry` (one of its bases), kept in a file of its own so that each reads in one
sitting: the leases and the commands clients send are in core/registry.py (a cancel removes
through `_remove` here, a registration lifts a removal through `_unbury`), the removals
remembered and the one rule weighing a removal against a copy in core/tombstones.py. When
expired leases may go is decided in core/preservation.py and core/eviction.py, whose sweep
calls `evict`; peers/ calls the rest.
"""

from __future__ import annotations

import structlog
from msgspec.structs import replace

from registry.core.checks import HELD_FOREVER_MS, CheckVerdicts
from registry.core.conflicts import RemovedHere
from registry.core.model import ActionType, InstanceInfo, Lease
from registry.core.part import RegistryPart
from registry.core.tombstones import Tombstone, Tombstones
from registry.errors import UnknownInstance

log = structlog.get_logger()


class Removals(RegistryPart):
    # What these commands use of the registry's state (core/registry.py); its methods they
    # call are declared in core/part.py.
    tombstones: Tombstones
    checks: CheckVerdicts
    expired_on_peers: dict[tuple[str, str], int]
    cancels: int
    evictions: int
    _apps: dict[str, dict[str, Lease]]
    _legacy: bool

    def evict(self, app: str, instance_id: str, *, now_ms: int, extra_ms: int = 0) -> bool:
        """Remove this lease if it is still expired; whether it went (contract 8).

        The eviction task picks leases and then evicts them over several loop turns, so each is
        checked again here: it may have renewed or re-registered in between. `extra_ms` is the
        task's own lateness, so a stalled loop never evicts instances that renewed on time.
        Overrides stay: an evicted instance that comes back is still under the admin's decision.
        """
        lease = self._apps.get(app, {}).get(instance_id)
        if lease is None or not lease.is_expired(now_ms, extra_ms):
            return False
        # All an eviction knows is that no renewal came after the last one seen here.
        dirty_ms = lease.instance.last_dirty_ms
        seen = Tombstone(app, instance_id, dirty_ms, self._renewed(lease), expired=True)
        self._remove(lease, now_ms, seen)
        self.evictions += 1
        log.info(
            "lease_evicted",
            app=app,
            instance_id=instance_id,
            last_renewal_ms=lease.last_renewal_ms,
        )
        return True

    def adopt(
        self, instance: InstanceInfo, *, now_ms: int, last_renewal_ms: int, renewing: bool = False
    ) -> bool:
        """Take a peer's copy of an instance as ours (contract 11.4), renewed when it says.

        For copies the peer holds newer data for: its answer to our heartbeat (409), start-up
        sync and anti-entropy. Applied as a replication, so it is not sent back out. A copy
        older than ours (by lastDirtyTimestamp), or one that loses to our removal of the
        instance (registry/core/tombstones.py), is refused: returns False. The copy's override is
        taken only where this node has none and removed none (see `merge_overrides`: overrides
        are decided by when the admin set or removed them, not by whose copy is newer).
        `renewing`: the copy had been renewed there (self-preservation expects it to renew).
        """
        existing = self._apps.get(instance.app, {}).get(instance.instance_id)
        if existing is not None and existing.instance.last_dirty_ms > instance.last_dirty_ms:
            return False
        try:
            self.register(
                instance,
                now_ms=now_ms,
                is_replication=True,
                last_renewal_ms=last_renewal_ms,
                carried=renewing,
            )
        except RemovedHere:
            return False
        return True

    def bury(self, removal: Tombstone, *, now_ms: int) -> bool:
        """A peer's removal of an instance (anti-entropy, start-up sync): our copy goes unless
        it wins over the removal (registry/core/tombstones.py); the removal is remembered when
        we hold no copy or ours went. Returns whether our copy went.

        A peer's eviction is evidence, not an order: our copy stays, marked, until this node's
        own eviction takes it (and leaves its own tombstone), first among the expired, when its
        self-preservation lets it (so no node loses more than its own cap to its peers'
        evictions). A restored copy's grace ends: the peer saw no renewal either."""
        lease = self._apps.get(removal.app, {}).get(removal.instance_id)
        if lease is None:
            self.tombstones.put(removal)
            return False
        if self._survives(lease, removal, now_ms):
            return False
        if removal.expired:
            renewed = self._renewed(lease)
            if lease.grace_until_ms != HELD_FOREVER_MS and renewed + lease.duration_ms < now_ms:
                lease.grace_until_ms = 0
            self.expired_on_peers[removal.app, removal.instance_id] = lease.last_renewal_ms
            return False
        self._remove(lease, now_ms, removal)
        self.cancels += 1
        log.debug("instance_buried", app=removal.app, instance_id=removal.instance_id)
        return True

    def renewed_elsewhere(
        self, app: str, instance_id: str, renewed_ms: int, *, now_ms: int
    ) -> bool:
        """A peer that does not send us its heartbeats (a stock Eureka server not yet told of
        this node) shows in its registry that it renewed the lease at `renewed_ms`: ours is
        renewed then too, as by a replicated heartbeat, when that is later than our own last
        renewal. Returns whether it was."""
        lease = self._apps.get(app, {}).get(instance_id)
        renewed_ms = min(renewed_ms, now_ms)
        if lease is None or lease.eviction_ms or renewed_ms <= self._renewed(lease):
            return False
        try:
            self.renew(app, instance_id, renewed_ms, is_replication=True)
        except UnknownInstance:
            return False
        return True

    # Internals ---------------------------------------------------------------------------

    def _remove(self, lease: Lease, now_ms: int, removal: Tombstone | None = None) -> None:
        """The lease goes, and a tombstone stays: `removal`'s, or a removal made now."""
        instance = lease.instance
        self.tombstones.put(
            removal or Tombstone(instance.app, instance.instance_id, instance.last_dirty_ms, now_ms)
        )
        self.checks.release(instance.instance_id)
        self.expired_on_peers.pop((instance.app, instance.instance_id), None)
        leases = self._apps[instance.app]
        del leases[instance.instance_id]
        if not leases:
            del self._apps[instance.app]
        lease.eviction_ms = now_ms
        lease.instance = replace(instance, action_type=ActionType.DELETED, last_updated_ms=now_ms)
        self._emit(ActionType.DELETED, lease, now_ms, instance)

    def _renewed(self, lease: Lease) -> int:
        """When the lease was last renewed: the evidence of life a removal is weighed against
        (legacy expiry stores the renewal a duration ahead)."""
        return lease.last_renewal_ms - lease.duration_ms if self._legacy else lease.last_renewal_ms

    def _survives(self, lease: Lease, removal: Tombstone, now_ms: int) -> bool:
        """Whether our lease wins over a peer's removal: by the rule, and only while its own
        evidence says it lives (a restored lease in its grace, not renewed for longer than its
        duration, has nothing to set against the removal)."""
        renewed = self._renewed(lease)
        return renewed + lease.duration_ms >= now_ms and self.tombstones.copy_wins(
            lease.instance.last_dirty_ms, renewed, removal
        )

    def _unbury(self, instance: InstanceInfo, is_replication: bool, renewed_ms: int) -> None:
        """An instance registers where a removal of it is remembered. A client's own
        registration always wins; a peer's copy only by the rule (RemovedHere otherwise)."""
        removal = self.tombstones.get(instance.app, instance.instance_id)
        if removal is None:
            return
        if is_replication and not self.tombstones.copy_wins(
            instance.last_dirty_ms, renewed_ms, removal
        ):
            raise RemovedHere(removal)
        self.tombstones.lift(instance.app, instance.instance_id)
