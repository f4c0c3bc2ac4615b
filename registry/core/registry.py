"""The registry: the only owner of instances, leases and admin overrides.

Every command is a plain synchronous method that takes the time as an argument, so commands are
atomic with respect to each other on the event loop and never await. Each change gets the next
registry index and is handed, as a `ChangeEvent`, to the subscribers (delta journal, response
cache, store writer), which never reach into the dictionaries here. Every change to an
override or its note is also handed, as an `OverrideChange`, to the override subscribers (the
store writer): what changed, and who did it.

Commands that arrive from clients (not from peers) are also handed to the `outbox`, which
replicates them. That is a separate hook because replication needs what events do not carry:
heartbeats (which change no state anyone fetches) and admin calls that changed nothing here.
"""

from __future__ import annotations

import secrets
import types
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, Protocol

import structlog
from msgspec.structs import replace

from registry.common.hashcode import hash_of_counts
from registry.core.model import (
    ActionType,
    ChangeEvent,
    InstanceInfo,
    InstanceStatus,
    Lease,
    ReplicationAction,
    check_metadata_size,
)
from registry.core.overrides import Note, OverrideAction, OverrideChange, OverrideNotes
from registry.core.tombstones import Tombstone, Tombstones, copy_wins
from registry.errors import (
    LimitReached,
    RegistryError,
    RemovedHere,
    StaleReplica,
    UnknownInstance,
)
from rules import CHAIN, Decision, decide, interned

log = structlog.get_logger()

Listener = Callable[[ChangeEvent], None]
OverrideListener = Callable[[OverrideChange], None]
Loaded = Callable[["Registry"], None]  # after a bulk load: take the registry as it now is


class Outbox(Protocol):
    """Where client-originated commands go to reach the peers (`peers.cluster.Cluster`)."""

    def __call__(
        self,
        action: ReplicationAction,
        app: str,
        instance_id: str,
        status: InstanceStatus | None = None,
        last_dirty_ms: int | None = None,
        at_ms: int | None = None,  # when the override was set or removed (the peer weighs it)
    ) -> None: ...


_UP = InstanceStatus.UP
_UNKNOWN = InstanceStatus.UNKNOWN
_A = ReplicationAction
_O = OverrideAction


_Decided = tuple[InstanceStatus, Decision]  # the chain's answer, and why


def _registered(
    instance: InstanceInfo, status: InstanceStatus, override: InstanceStatus | None, now_ms: int
) -> InstanceInfo:
    """The instance as a registration leaves it: with its status from the chain."""
    return replace(
        instance,
        status=status,
        overridden_status=_UNKNOWN if override is None else override,
        action_type=ActionType.ADDED,
        last_updated_ms=now_ms,
    )


def _claimed(instance: InstanceInfo) -> InstanceStatus:
    """The status a copy (a peer's, a store row) says its client claims. One whose status is
    its override's says nothing of the client's own: taken as UP, so that this node's override
    decides, if it has one (an admin's DOWN elsewhere must not pass for the client's own
    DOWN, which the chain's first rule would keep over any override)."""
    status = instance.status
    if status is instance.overridden_status and status is not _UNKNOWN:
        return _UP
    return status


def _admin(action: str, status: InstanceStatus) -> Decision:
    """A status set by an admin's call (or its expiry) rather than by the rule chain."""
    return interned(Decision(action, None, status, None, False))


class Registry:
    def __init__(
        self,
        *,
        legacy_lease_expiry: bool = False,
        sync_when_timestamp_differs: bool = True,
        removal_margin_ms: int = 10_000,
        tombstone_retention_ms: int = 3_600_000,
        max_clock_skew_ms: int = 300_000,
        max_applications: int = 0,
        max_instances_per_application: int = 0,
    ) -> None:
        self._apps: dict[str, dict[str, Lease]] = {}
        self._overrides: dict[str, InstanceStatus] = {}
        # What the admin said with each override (why, when, until when, who), and when the
        # overrides removed were removed: read it here, change it only through the commands.
        self.notes = OverrideNotes()
        # Instances cancelled or evicted, so no copy of them comes back (core/tombstones.py).
        self.tombstones = Tombstones(retention_ms=tombstone_retention_ms)
        self._margin = removal_margin_ms
        self._skew_ms = max_clock_skew_ms  # how far ahead a peer's time may be taken
        # What clients may register (0: no cap); a peer's registrations are its own to cap.
        self._max_apps = max_applications
        self._max_per_app = max_instances_per_application
        self._listeners: list[Listener] = []
        self._override_listeners: list[OverrideListener] = []
        self._loaded: list[Loaded] = []
        self._first_renewals: list[Callable[[Lease], None]] = []
        self._legacy = legacy_lease_expiry
        self._sync_dirty = sync_when_timestamp_differs
        self.index = 0
        # Names this run of the registry: an index means nothing to another node or run.
        self.epoch = secrets.token_hex(4)
        self.renewals = 0  # heartbeats accepted since start, client and replicated
        self.registrations = 0
        self.cancels = 0
        self.evictions = 0
        # Instances by status, kept by every change: the reconcile hash without a recount.
        self._statuses: Counter[InstanceStatus] = Counter()
        self._hash = (-1, "")  # (index, reconcile hash at that index)
        self.outbox: Outbox | None = None

    def subscribe(
        self,
        listener: Listener,
        loaded: Loaded | None = None,
        *,
        overrides: OverrideListener | None = None,
        first_renewal: Callable[[Lease], None] | None = None,
    ) -> None:
        """Call `listener` with every change from now on, synchronously, in index order,
        `loaded` (when given) after a bulk `load`, which makes no event per instance,
        `overrides` (when given) with every change to an override or its note, and
        `first_renewal` (when given) with a lease at its first renewal (`Lease.renewed`)."""
        self._listeners.append(listener)
        if loaded is not None:
            self._loaded.append(loaded)
        if overrides is not None:
            self._override_listeners.append(overrides)
        if first_renewal is not None:
            self._first_renewals.append(first_renewal)

    # Commands ----------------------------------------------------------------------------

    def register(
        self,
        instance: InstanceInfo,
        *,
        now_ms: int,
        is_replication: bool = False,
        last_renewal_ms: int | None = None,
    ) -> InstanceInfo:
        """Register or re-register an instance with a fresh lease (contract 6.2).

        `last_renewal_ms` backdates the lease, for a copy taken from a peer whose own lease is
        older: an instance that died there must not get a full new life here. Logged at debug
        level: a deploy registers thousands a second (registry/health/activity.py sums them up).
        """
        leases = self._apps.get(instance.app)
        existing = None if leases is None else leases.get(instance.instance_id)
        if existing is None and not is_replication:
            self._check_room(instance.app, leases)
        if existing is None and len(self.tombstones):
            self._unbury(
                instance, is_replication, now_ms if last_renewal_ms is None else last_renewal_ms
            )
        leases = self._apps.setdefault(instance.app, {})
        self.registrations += 1
        registrant = instance
        if existing is not None and existing.instance.last_dirty_ms > instance.last_dirty_ms:
            # Ours is newer than what arrived (a late replica, a stale client): keep ours.
            # A client's is worth a warning: another may have taken its id.
            (log.info if is_replication else log.warning)(
                "registration_older_than_ours",
                app=instance.app,
                instance_id=instance.instance_id,
                ours=existing.instance.last_dirty_ms,
                theirs=instance.last_dirty_ms,
            )
            registrant = existing.instance
        iid = registrant.instance_id
        if registrant.overridden_status is not _UNKNOWN:
            # How stock Eureka peers hand over an override: it comes in the registration.
            self._take_override(registrant.app, iid, registrant.overridden_status, now_ms)
        override = self._overrides.get(iid)
        status, decision = decide(
            CHAIN,
            _claimed(registrant) if is_replication else registrant.status,
            override,
            existing.instance.status if existing is not None else None,
            is_replication,
        )
        lease = Lease(
            instance=_registered(registrant, status, override, now_ms),
            duration_ms=instance.duration_secs * 1000,  # asked for by this call, as in Eureka
            registration_ms=now_ms,
            last_renewal_ms=now_ms if last_renewal_ms is None else min(last_renewal_ms, now_ms),
            service_up_ms=existing.service_up_ms if existing is not None else 0,
            decision=decision,
            renewed=existing is not None and existing.renewed,
        )
        if status is _UP and lease.service_up_ms == 0:
            lease.service_up_ms = now_ms
        leases[iid] = lease
        log.debug(
            "instance_registered",
            app=registrant.app,
            instance_id=iid,
            status=status.value,
            replication=is_replication,
        )
        self._emit(ActionType.ADDED, lease, now_ms, None if existing is None else existing.instance)
        if self.outbox is not None and not is_replication:
            self.outbox(_A.REGISTER, registrant.app, iid)
        return lease.instance

    def _check_room(self, app: str, leases: dict[str, Lease] | None) -> None:
        if leases is None and self._max_apps and len(self._apps) >= self._max_apps:
            raise LimitReached(
                f"{len(self._apps)} applications are registered, max_applications: {app!r} "
                "would be one more"
            )
        if leases is not None and self._max_per_app and len(leases) >= self._max_per_app:
            raise LimitReached(f"{app} has {len(leases)} instances, max_instances_per_application")

    def load(
        self,
        instances: Iterable[InstanceInfo],
        *,
        now_ms: int,
        renewals: Iterable[int] | None = None,
    ) -> int:
        """Register many instances at once into an empty registry, as registrations from a
        peer would (a warm restart of 100 000 instances). Each gets what `register` would give
        it, but there is no event: listeners are told once, by their `loaded` hook, and the
        index moves by one per instance as it would. Returns how many.

        `renewals` (one per instance, a store's): the leases keep these last renewals, which
        peers weigh against their removals, and get a lease duration from `now_ms` of grace
        to be renewed before eviction may take them."""
        stored = iter(renewals) if renewals is not None else None
        if self._apps:
            raise RegistryError("a bulk load is for an empty registry")
        overrides = self._overrides
        # The chain's answer depends only on the claimed status and the override here (no
        # lease exists, and it counts as a replication): asked once per pair, not per instance.
        decisions: dict[tuple[InstanceStatus, InstanceStatus | None], _Decided] = {}
        count = 0
        for instance in instances:
            iid = instance.instance_id
            leases = self._apps.setdefault(instance.app, {})
            renewal = now_ms if stored is None else min(next(stored), now_ms)
            if iid in leases:  # met twice: the second is a re-registration, as ever
                self.register(instance, now_ms=now_ms, is_replication=True)
                continue
            if instance.overridden_status is not _UNKNOWN and iid not in overrides:
                # A row carrying an override its store's table lacks (written by a release
                # that could leave them apart): in force, and told, so the store gets it back.
                self._take_override(instance.app, iid, instance.overridden_status, now_ms)
            override = overrides.get(iid)
            claimed = _claimed(instance)
            decided = decisions.get((claimed, override))
            if decided is None:
                decided = decide(CHAIN, claimed, override, None, True)
                decisions[claimed, override] = decided
            status, decision = decided
            if (
                instance.status is not status
                or instance.overridden_status is not (override or _UNKNOWN)
                or instance.action_type is not ActionType.ADDED
                or instance.last_updated_ms != now_ms
            ):
                instance = _registered(instance, status, override, now_ms)
            duration_ms = instance.duration_secs * 1000
            leases[iid] = Lease(
                instance=instance,
                duration_ms=duration_ms,
                registration_ms=now_ms,
                last_renewal_ms=renewal,
                service_up_ms=now_ms if status is _UP else 0,
                decision=decision,
                grace_until_ms=0 if stored is None else now_ms + duration_ms,
                renewed=stored is not None,
            )
            self._statuses[status] += 1
            count += 1
        self.registrations += count
        self.index += count
        for loaded in self._loaded:
            loaded(self)
        log.debug("instances_loaded", instances=count)
        return count

    def restore(
        self,
        overrides: Mapping[str, InstanceStatus],
        index: int,
        notes: Iterable[tuple[str, Note]] = (),
        *,
        tombstones: Iterable[Tombstone] = (),
        override_removals: Iterable[tuple[str, str, int]] = (),
    ) -> None:
        """Take a store's overrides, their notes, override removals, tombstones and index (a
        warm restart), before its instances come back: restored instances then show their
        overrides, and the index never goes backwards. No subscriber is told: the store holds
        them already (see `load` for what its instances may carry beyond them)."""
        for iid, app, at_ms in override_removals:
            self.notes.removed(iid, app, at_ms)
        self._overrides.update(overrides)
        for iid, note in notes:
            self.notes.note(iid, note)
        for tombstone in tombstones:
            self.tombstones.put(tombstone)
        self.index = max(self.index, index)

    def adopt(self, instance: InstanceInfo, *, now_ms: int, last_renewal_ms: int) -> bool:
        """Take a peer's copy of an instance as ours (contract 11.4), renewed when it says.

        For copies the peer holds newer data for: its answer to our heartbeat (409), start-up
        sync and anti-entropy. Applied as a replication, so it is not sent back out. A copy
        older than ours (by lastDirtyTimestamp), or one that loses to our removal of the
        instance (registry/core/tombstones.py), is refused: returns False. The copy's override is
        taken only where this node has none and removed none (see `merge_overrides`: overrides
        are decided by when the admin set or removed them, not by whose copy is newer).
        """
        existing = self._apps.get(instance.app, {}).get(instance.instance_id)
        if existing is not None and existing.instance.last_dirty_ms > instance.last_dirty_ms:
            return False
        try:
            self.register(
                instance, now_ms=now_ms, is_replication=True, last_renewal_ms=last_renewal_ms
            )
        except RemovedHere:
            return False
        return True

    def bury(self, removal: Tombstone, *, now_ms: int) -> bool:
        """A peer's removal of an instance (anti-entropy, start-up sync): our copy goes unless
        it wins over the removal (registry/core/tombstones.py); the removal is remembered either
        way it does not lose. Returns whether our copy went."""
        lease = self._apps.get(removal.app, {}).get(removal.instance_id)
        if lease is None:
            self.tombstones.put(removal)
            return False
        if self._survives(lease, removal, now_ms):
            return False
        self._remove(lease, now_ms, removal)
        self.cancels += 1
        log.debug("instance_buried", app=removal.app, instance_id=removal.instance_id)
        return True

    def renew(
        self,
        app: str,
        instance_id: str,
        now_ms: int,
        is_replication: bool = False,
        last_dirty_ms: int | None = None,
        overridden_status: InstanceStatus | None = None,
    ) -> None:
        """A heartbeat (contract 3.2, 6.3): UnknownInstance means 404, StaleReplica 409.

        The hot path: one lookup and one store, unless an override is in force or the
        caller's lastDirtyTimestamp differs from ours. Written flat, and called with positional
        arguments by the heartbeat handler, on purpose: every call saved here is measurable in
        the heartbeat benchmark.
        """
        leases = self._apps.get(app)
        lease = leases.get(instance_id) if leases is not None else None
        if lease is None:
            raise UnknownInstance(f"no instance {instance_id!r} in application {app!r}")
        instance = lease.instance
        override = self._overrides.get(instance_id)
        if override is not None or instance.status is _UNKNOWN:
            # Without an override the chain can only answer the holder's own status, so a
            # renewal changes nothing; with one, or when the holder is UNKNOWN, ask the chain.
            status, decision = decide(
                CHAIN, instance.status, override, instance.status, is_replication
            )
            if status is _UNKNOWN:
                raise UnknownInstance(f"{app}/{instance_id}: status UNKNOWN, re-register")
            lease.decision = decision
            if status is not instance.status:
                self._change(lease, now_ms, status=status)
        lease.renew(now_ms, self._legacy)
        self.renewals += 1
        if not lease.renewed:  # once per lease: a client that renews, from now on
            lease.renewed = True
            for first_renewal in self._first_renewals:
                first_renewal(lease)
        if (
            last_dirty_ms is not None
            and last_dirty_ms != lease.instance.last_dirty_ms
            and self._sync_dirty
        ):
            self._compare_dirty(lease, last_dirty_ms, is_replication, overridden_status, now_ms)
        if self.outbox is not None and not is_replication:
            self.outbox(_A.HEARTBEAT, app, instance_id)

    def cancel(
        self,
        app: str,
        instance_id: str,
        *,
        now_ms: int,
        is_replication: bool = False,
        by: str | None = None,
        removal: Tombstone | None = None,
    ) -> None:
        """Deregister an instance (contract 6.4). Its override stays (unlike Eureka's): an
        admin's decision is removed by the admin plane or its expiry, never by a client's
        cancel and re-registration. The override's history records the cancel, and `by`.

        `removal`: what a peer's cancel says it removed, and when. Our copy wins over it when
        it is newer by the rule of registry/core/tombstones.py (StaleReplica: the peer takes our
        copy); an instance not held here is remembered as removed (then UnknownInstance).
        """
        lease = self._apps.get(app, {}).get(instance_id)
        if lease is None:
            if removal is not None:
                self.tombstones.put(removal)
            raise UnknownInstance(f"no instance {instance_id!r} in application {app!r}")
        if removal is not None and self._survives(lease, removal, now_ms):
            raise StaleReplica(lease)
        self._remove(lease, now_ms, removal)
        self.cancels += 1
        if instance_id in self._overrides:
            self._told(_O.INSTANCE_CANCELLED, app, instance_id, now_ms, by)
        log.debug(
            "instance_cancelled", app=app, instance_id=instance_id, replication=is_replication
        )
        if self.outbox is not None and not is_replication:
            self.outbox(_A.CANCEL, app, instance_id)

    def set_status_override(
        self,
        app: str,
        instance_id: str,
        status: InstanceStatus,
        *,
        now_ms: int,
        last_dirty_ms: int | None = None,
        is_replication: bool = False,
        note: Note | None = None,
    ) -> None:
        """An admin forces a status (contract 6.5), with what the admin said (`note`); it holds
        until an admin deletes it or its expiry comes.

        Unlike Eureka the override is stored even when the instance already has that status, so
        the admin's decision survives the instance's own status changes. A repeated call is
        replicated again, which lets an admin re-send a decision a peer may have missed.

        A peer's call older than this node's own last word on the override (set or removed
        later, by the notes' times) changes nothing: every node keeps the latest.
        """
        lease = self._live_lease(app, instance_id, now_ms)
        if (
            is_replication
            and note is not None
            and not self._override_older(instance_id, note.set_ms)
        ):
            log.info("override_older_than_ours", app=app, instance_id=instance_id)
            return
        lease.hold(now_ms)
        self._set_override(lease, status, now_ms, last_dirty_ms)
        if note is not None:
            self.notes.note(instance_id, note)
        elif self.notes.of(instance_id, status) is None:
            self.notes.forget(instance_id)  # a note of another status must not come back
        # Told even when nothing but the note changed, or nothing at all: it is written again.
        self._told(_O.SET, app, instance_id, now_ms, None if note is None else note.by)
        if self.outbox is not None and not is_replication:
            kept = self.notes.of(instance_id, status)
            self.outbox(
                _A.STATUS_UPDATE,
                app,
                instance_id,
                status,
                lease.instance.last_dirty_ms,
                None if kept is None else kept.set_ms,
            )

    def _set_override(
        self, lease: Lease, status: InstanceStatus, now_ms: int, last_dirty_ms: int | None
    ) -> None:
        instance = lease.instance
        instance_id = instance.instance_id
        if (
            self._overrides.get(instance_id) is status
            and instance.status is status
            and instance.overridden_status is status
        ):
            return
        self._overrides[instance_id] = status
        lease.decision = _admin("an admin's override", status)
        if status is _UP and lease.service_up_ms == 0:
            lease.service_up_ms = now_ms
        self._change(
            lease,
            now_ms,
            status=status,
            overridden_status=status,
            last_dirty_ms=max(instance.last_dirty_ms, last_dirty_ms or 0),
        )
        log.info("override_set", app=instance.app, instance_id=instance_id, status=status.value)

    def delete_status_override(
        self,
        app: str,
        instance_id: str,
        *,
        now_ms: int,
        status: InstanceStatus = _UNKNOWN,
        last_dirty_ms: int | None = None,
        is_replication: bool = False,
        by: str | None = None,
        removed_ms: int | None = None,
    ) -> None:
        """Remove an admin override (contract 6.6), leaving `status` behind it; `by` is the
        admin, for its history.

        The default UNKNOWN makes the next heartbeat answer 404, so the client re-registers
        and its own status takes over again. The override of an instance that is gone
        (cancelled, evicted, its lease lapsed) is removed too; with neither, UnknownInstance.
        `removed_ms`: when a peer's admin removed it; an override set here later stays.
        """
        at_ms = now_ms if removed_ms is None else removed_ms
        if (
            is_replication
            and removed_ms is not None
            and not self._override_older(instance_id, removed_ms)
        ):
            log.info("override_older_than_ours", app=app, instance_id=instance_id)
            return
        if not self._holds(app, instance_id, now_ms) and instance_id in self._overrides:
            self._delete_gone(app, instance_id, now_ms, status, last_dirty_ms, by, at_ms)
            if self.outbox is not None and not is_replication:
                self.outbox(
                    _A.DELETE_STATUS_OVERRIDE, app, instance_id, status, last_dirty_ms, at_ms
                )
            return
        lease = self._live_lease(app, instance_id, now_ms)
        lease.hold(now_ms)
        had = self._overrides.pop(instance_id, None) is not None
        # Remembered even when there was none: a set older than this decision, arriving later
        # from a peer, must lose to it.
        self.notes.removed(instance_id, app, at_ms)
        if had:
            self._told(_O.DELETED, app, instance_id, now_ms, by)
            self._override_deleted(lease, status, now_ms, last_dirty_ms)
            log.info("override_deleted", app=app, instance_id=instance_id, status=status.value)
        if self.outbox is not None and not is_replication:
            self.outbox(
                _A.DELETE_STATUS_OVERRIDE,
                app,
                instance_id,
                status,
                lease.instance.last_dirty_ms,
                at_ms,
            )

    def _delete_gone(
        self,
        app: str,
        instance_id: str,
        now_ms: int,
        status: InstanceStatus,
        last_dirty_ms: int | None,
        by: str | None,
        at_ms: int,
    ) -> None:
        """The override of an instance no live lease in `app` holds. One that another
        application's live instance holds is not this call's; a lapsed lease loses it too, so
        that what is stored of the instance never carries an override that is gone."""
        try:
            elsewhere = self.find(instance_id, now_ms=now_ms).instance.app
        except UnknownInstance:
            elsewhere = None
        if elsewhere is not None:
            raise UnknownInstance(
                f"no instance {instance_id!r} in {app!r} (it is in {elsewhere!r})"
            )
        del self._overrides[instance_id]
        self.notes.removed(instance_id, app, at_ms)
        self._told(_O.DELETED, app, instance_id, now_ms, by)
        lapsed = self._apps.get(app, {}).get(instance_id)
        if lapsed is not None:
            self._override_deleted(lapsed, status, now_ms, last_dirty_ms)
        log.info("override_deleted", app=app, instance_id=instance_id, instance="gone")

    def _override_deleted(
        self, lease: Lease, status: InstanceStatus, now_ms: int, last_dirty_ms: int | None
    ) -> None:
        """The instance without its override: `status` left behind it."""
        lease.decision = _admin("an admin's override deleted", status)
        self._change(
            lease,
            now_ms,
            status=status,
            overridden_status=_UNKNOWN,
            last_dirty_ms=max(lease.instance.last_dirty_ms, last_dirty_ms or 0),
        )

    def expire_due(self, *, now_ms: int) -> list[tuple[str, str]]:
        """Remove every override whose expiry has come (see `expire_override`); the
        (application, instance id) of each. Driven by the clock, once a second."""
        expired = []
        for iid, note in list(self.notes.expired(self._overrides, now_ms)):
            expired.append((self.expire_override(iid, now_ms=now_ms) or note.app, iid))
        return expired

    def take_notes(self, theirs: Iterable[tuple[str, Note]]) -> list[str]:
        """A peer's notes, for the overrides held here with the same status that lack one or
        hold an older one (start-up sync, anti-entropy); the instance ids of those taken."""
        taken = self.notes.take(theirs, self._overrides)
        for iid in taken:
            note = self.notes.of(iid, self._overrides[iid])
            assert note is not None  # just taken
            self._told(_O.SET, note.app, iid, note.set_ms, note.by)
        return taken

    def expire_override(self, instance_id: str, *, now_ms: int) -> str | None:
        """An override's expiry came: remove it as an admin's DELETE without a value would
        (status UNKNOWN, so the next heartbeat re-registers), without renewing the lease, even
        if it has lapsed. Returns the application of the instance it was on, or None when no
        instance holds the id (it was evicted: the override just goes)."""
        status = self._overrides.get(instance_id)
        note = None if status is None else self.notes.of(instance_id, status)
        # Removed as of its expiry, the same moment on every node.
        at_ms = note.expires_ms if note is not None and note.expires_ms is not None else now_ms
        lease = self._drop_override(instance_id, _O.EXPIRED, now_ms, at_ms)
        if lease is None:
            return None
        instance = lease.instance
        log.info("override_expired", app=instance.app, instance_id=instance_id)
        if self.outbox is not None:
            self.outbox(
                _A.DELETE_STATUS_OVERRIDE,
                instance.app,
                instance_id,
                _UNKNOWN,
                instance.last_dirty_ms,
                at_ms,
            )
        return instance.app

    def _drop_override(
        self, instance_id: str, action: OverrideAction, now_ms: int, at_ms: int
    ) -> Lease | None:
        """Remove an override (removed as of `at_ms`) and leave its instance UNKNOWN, so that
        the next heartbeat re-registers; the instance's lease, None when no instance holds it."""
        status = self._overrides.pop(instance_id, None)
        if status is None:
            return None
        note = self.notes.of(instance_id, status)
        lease = next(
            (found for leases in self._apps.values() if (found := leases.get(instance_id))),
            None,
        )
        app = lease.instance.app if lease is not None else note.app if note is not None else ""
        self.notes.removed(instance_id, app, at_ms)
        self._told(action, app, instance_id, now_ms)
        if lease is not None:
            why = "an override's expiry" if action is _O.EXPIRED else "a peer's override removal"
            lease.decision = _admin(why, _UNKNOWN)
            self._change(lease, now_ms, status=_UNKNOWN, overridden_status=_UNKNOWN)
        return lease

    def merge_overrides(
        self,
        notes: Iterable[tuple[str, Note]],
        removals: Iterable[tuple[str, str, int]],
        *,
        now_ms: int,
    ) -> int:
        """A peer's overrides (their notes) and override removals (id, app, when): each one
        later than this node's own last word on that instance's override is taken, so that
        after a partition every node holds the latest decision, whichever side made it.
        Applied as a replication (not sent on). Times further ahead of `now_ms` than the
        clock skew allowed are not taken: they would win every later comparison. Returns how
        many changed here."""
        changed = 0
        ahead_ms = now_ms + self._skew_ms
        for iid, note in notes:
            if note.set_ms > ahead_ms or not self._override_older(iid, note.set_ms):
                continue
            if self._overrides.get(iid) is note.status:  # the same decision: its newer note
                self.notes.note(iid, note)
                self._told(_O.SET, note.app, iid, note.set_ms, note.by)
            else:
                self._overrides[iid] = note.status
                self.notes.note(iid, note)
                self._told(_O.SET, note.app, iid, now_ms, note.by)
                lease = self._apps.get(note.app, {}).get(iid)
                if lease is not None:
                    self._set_override(lease, note.status, now_ms, None)
            changed += 1
        for iid, app, at_ms in removals:
            if at_ms > ahead_ms or not self._override_older(iid, at_ms):
                continue
            if iid in self._overrides:
                self._drop_override(iid, _O.DELETED, now_ms, at_ms)
                log.info("override_deleted", app=app, instance_id=iid, by="peer")
                changed += 1
            else:
                self.notes.removed(iid, app, at_ms)
        return changed

    def update_metadata(
        self, app: str, instance_id: str, entries: Mapping[str, str], *, now_ms: int
    ) -> None:
        """Merge metadata and re-register as a client call, as Eureka does (contract 3.6)."""
        instance = self._live_lease(app, instance_id, now_ms).instance
        merged = {**instance.metadata, **entries}
        check_metadata_size(merged)
        self.register(replace(instance, metadata=merged), now_ms=now_ms)

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
        seen = Tombstone(app, instance_id, lease.instance.last_dirty_ms, self._renewed(lease))
        self._remove(lease, now_ms, seen)
        self.evictions += 1
        log.info(
            "lease_evicted",
            app=app,
            instance_id=instance_id,
            last_renewal_ms=lease.last_renewal_ms,
        )
        return True

    # Reads -------------------------------------------------------------------------------

    def get(self, app: str, instance_id: str, *, now_ms: int) -> Lease:
        """The live lease of one instance; an expired one counts as gone."""
        return self._live_lease(app, instance_id, now_ms)

    def instance_or_none(self, app: str, instance_id: str, *, now_ms: int) -> InstanceInfo | None:
        """The instance of a live lease, or None: `get` without the exception, for the
        replication sender, which asks once per item and peer."""
        lease = self._apps.get(app, {}).get(instance_id)
        return None if lease is None or lease.is_expired(now_ms) else lease.instance

    def find(self, instance_id: str, *, now_ms: int) -> Lease:
        """The live lease with this instance id, in whichever application holds it."""
        for leases in self._apps.values():
            lease = leases.get(instance_id)
            if lease is not None and not lease.is_expired(now_ms):
                return lease
        raise UnknownInstance(f"no instance {instance_id!r}")

    def applications(self) -> Iterator[tuple[str, Collection[Lease]]]:
        """Each application that has instances, with its leases (expired ones included)."""
        for name, leases in self._apps.items():
            if leases:
                yield name, leases.values()

    def application_names(self) -> Iterator[str]:
        return iter(self._apps)

    def application(self, app: str) -> Collection[Lease]:
        return self._apps.get(app, {}).values()

    def leases(self) -> Iterator[Lease]:
        for leases in self._apps.values():
            yield from leases.values()

    def reconcile_hash(self) -> str:
        """`apps__hashcode` of the whole registry, from the counts every change keeps."""
        if self._hash[0] != self.index:
            self._hash = (self.index, hash_of_counts(self._statuses))
        return self._hash[1]

    def overrides(self) -> Mapping[str, InstanceStatus]:
        return types.MappingProxyType(self._overrides)

    def __len__(self) -> int:
        return sum(len(leases) for leases in self._apps.values())

    # Internals ---------------------------------------------------------------------------

    def _lease(self, app: str, instance_id: str) -> Lease:
        lease = self._apps.get(app, {}).get(instance_id)
        if lease is None:
            raise UnknownInstance(f"no instance {instance_id!r} in application {app!r}")
        return lease

    def _holds(self, app: str, instance_id: str, now_ms: int) -> bool:
        lease = self._apps.get(app, {}).get(instance_id)
        return lease is not None and not lease.is_expired(now_ms)

    def _live_lease(self, app: str, instance_id: str, now_ms: int) -> Lease:
        lease = self._lease(app, instance_id)
        if lease.is_expired(now_ms):
            raise UnknownInstance(f"the lease of {app}/{instance_id} has expired")
        return lease

    def _override_older(self, instance_id: str, at_ms: int) -> bool:
        """Whether this node's last word on the instance's override (set, or removed) is
        older than `at_ms` (or it has none). An override without a note (taken from a stock
        peer's copy) has no known time: any decision with one is newer."""
        status = self._overrides.get(instance_id)
        if status is not None:
            note = self.notes.of(instance_id, status)
            return note is None or note.set_ms < at_ms
        removed_ms = self.notes.removed_at(instance_id)
        return removed_ms is None or removed_ms < at_ms

    def _take_override(
        self, app: str, instance_id: str, status: InstanceStatus, now_ms: int
    ) -> None:
        """An override a copy carries (a stock peer's registration or heartbeat, a store row):
        taken where this node holds none and removed none, since its time is unknown."""
        if instance_id in self._overrides or self.notes.removed_at(instance_id) is not None:
            return
        self._overrides[instance_id] = status
        self._told(_O.SET, app, instance_id, now_ms)

    def _renewed(self, lease: Lease) -> int:
        """When the lease was last renewed: the evidence of life a removal is weighed against
        (legacy expiry stores the renewal a duration ahead)."""
        return lease.last_renewal_ms - lease.duration_ms if self._legacy else lease.last_renewal_ms

    def _survives(self, lease: Lease, removal: Tombstone, now_ms: int) -> bool:
        """Whether our lease wins over a peer's removal: by the rule, and only while its own
        evidence says it lives (a restored lease in its grace, not renewed for longer than its
        duration, has nothing to set against the removal)."""
        renewed = self._renewed(lease)
        return renewed + lease.duration_ms >= now_ms and copy_wins(
            lease.instance.last_dirty_ms, renewed, removal, self._margin
        )

    def _unbury(self, instance: InstanceInfo, is_replication: bool, renewed_ms: int) -> None:
        """An instance registers where a removal of it is remembered. A client's own
        registration always wins; a peer's copy only by the rule (RemovedHere otherwise)."""
        removal = self.tombstones.get(instance.app, instance.instance_id)
        if removal is None:
            return
        if is_replication and not copy_wins(
            instance.last_dirty_ms, renewed_ms, removal, self._margin
        ):
            raise RemovedHere(removal)
        self.tombstones.lift(instance.app, instance.instance_id)

    def _compare_dirty(
        self,
        lease: Lease,
        last_dirty_ms: int,
        is_replication: bool,
        overridden_status: InstanceStatus | None,
        now_ms: int,
    ) -> None:
        ours = lease.instance.last_dirty_ms
        if last_dirty_ms > ours:
            if is_replication and overridden_status not in (None, _UNKNOWN):
                instance = lease.instance
                self._take_override(instance.app, instance.instance_id, overridden_status, now_ms)
                if self._overrides.get(instance.instance_id) is overridden_status:
                    self._change(lease, now_ms, overridden_status=overridden_status)
            raise UnknownInstance(
                f"{lease.instance.app}/{lease.instance.instance_id}: the caller's data is newer "
                f"({last_dirty_ms} > {ours}), re-register"
            )
        if last_dirty_ms < ours and is_replication:
            raise StaleReplica(lease)

    def _change(self, lease: Lease, now_ms: int, **fields: Any) -> None:
        previous = lease.instance
        lease.instance = replace(
            previous, action_type=ActionType.MODIFIED, last_updated_ms=now_ms, **fields
        )
        self._emit(ActionType.MODIFIED, lease, now_ms, previous)

    def _remove(self, lease: Lease, now_ms: int, removal: Tombstone | None = None) -> None:
        """The lease goes, and a tombstone stays: `removal`'s, or a removal made now."""
        instance = lease.instance
        self.tombstones.put(
            removal or Tombstone(instance.app, instance.instance_id, instance.last_dirty_ms, now_ms)
        )
        leases = self._apps[instance.app]
        del leases[instance.instance_id]
        if not leases:
            del self._apps[instance.app]
        lease.eviction_ms = now_ms
        lease.instance = replace(instance, action_type=ActionType.DELETED, last_updated_ms=now_ms)
        self._emit(ActionType.DELETED, lease, now_ms, instance)

    def _told(
        self,
        action: OverrideAction,
        app: str,
        instance_id: str,
        at_ms: int,
        by: str | None = None,
    ) -> None:
        """Tell the override subscribers what an override (and its note) now is."""
        status = self._overrides.get(instance_id)
        note = None if status is None else self.notes.of(instance_id, status)
        change = OverrideChange(action, app, instance_id, status, at_ms, note, by)
        for listener in self._override_listeners:
            listener(change)

    def _emit(
        self, action: ActionType, lease: Lease, now_ms: int, previous: InstanceInfo | None
    ) -> None:
        self.index += 1
        if previous is not None:
            self._statuses[previous.status] -= 1
        if action is not ActionType.DELETED:
            self._statuses[lease.instance.status] += 1
        event = ChangeEvent(
            action=action,
            lease=lease.snapshot(),
            index=self.index,
            at_ms=now_ms,
            previous=previous,
        )
        for listener in self._listeners:
            listener(event)
