"""The registry's commands on admins' overrides: the admin plane's set and delete, their
expiry, and peers' decisions merged after a partition.

A part of `Registry` (one of its bases), kept in a file of its own so that each reads in one
sitting: the leases and their commands are in core/registry.py, the overrides' state (the
status each holds, notes, removals, and telling the override subscribers) in
core/overrides.py. These commands decide which decision is the latest, then show it on the
instance (a change event) and hand the admin's call to the replication part.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import replace

import structlog

from registry.common.clock import Clock
from registry.common.tasks import Loops
from registry.core.model import InstanceStatus, Lease, ReplicationAction
from registry.core.overrides import Note, OverrideAction, Overrides
from registry.core.part import RegistryPart
from registry.errors import UnknownInstance
from rules import Decision, interned

log = structlog.get_logger()

_UP = InstanceStatus.UP
_UNKNOWN = InstanceStatus.UNKNOWN
_A = ReplicationAction
_O = OverrideAction


def _admin(action: str, status: InstanceStatus) -> Decision:
    """A status set by an admin's call (or its expiry) rather than by the rule chain."""
    return interned(Decision(action, None, status, None, False))


class OverrideCommands(RegistryPart):
    # What these commands use of the registry's state (core/registry.py); its methods they
    # call are declared in core/part.py.
    overrides: Overrides
    _apps: dict[str, dict[str, Lease]]
    _skew_ms: int

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
        later, by the notes' times) changes nothing: every node keeps the latest. An admin's
        call here is dated after that last word (`Overrides.next_ms`).
        """
        lease = self._live_lease(app, instance_id, now_ms)
        if not is_replication and note is not None:
            note = replace(note, set_ms=self.overrides.next_ms(instance_id, note.set_ms))
        if (
            is_replication
            and note is not None
            and not self.overrides.older_than(instance_id, note.set_ms, status)
        ):
            log.info("override_older_than_ours", app=app, instance_id=instance_id)
            return
        lease.hold(now_ms)
        by = None if note is None else note.by
        self.overrides.set(app, instance_id, status, note, at_ms=now_ms, by=by)
        self._show_override(lease, status, now_ms, last_dirty_ms)
        if not is_replication:
            self._send_override(lease, status)

    def resend_override(self, app: str, instance_id: str, *, now_ms: int) -> bool:
        """Replicate this node's override of a live instance again, for a peer found without
        it (a stock Eureka node forgets overrides when it restarts: it copies only the
        instances that are UP). Our peers already holding it change nothing."""
        status = self.overrides.get(instance_id)
        if status is None or not self._holds(app, instance_id, now_ms):
            return False
        self._send_override(self._live_lease(app, instance_id, now_ms), status)
        return True

    def _send_override(self, lease: Lease, status: InstanceStatus) -> None:
        """Replicate the override in force on `lease`, dated by its note."""
        instance = lease.instance
        kept = self.overrides.note_of(instance.instance_id)
        self._replicate(
            _A.STATUS_UPDATE,
            instance.app,
            instance.instance_id,
            status,
            instance.last_dirty_ms,
            None if kept is None else kept.set_ms,
        )

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
        if removed_ms is not None:
            at_ms = removed_ms
        else:  # this node's call: dated after its last word (`Overrides.next_ms`)
            at_ms = self.overrides.next_ms(instance_id, now_ms)
        if (
            is_replication
            and removed_ms is not None
            and not self.overrides.older_than(instance_id, removed_ms, None)
        ):
            log.info("override_older_than_ours", app=app, instance_id=instance_id)
            return
        why = "an admin's override deleted"
        if not self._holds(app, instance_id, now_ms) and instance_id in self.overrides:
            lapsed = self._lapsed_holder(app, instance_id, now_ms)
            self.overrides.remove(app, instance_id, _O.DELETED, now_ms=now_ms, at_ms=at_ms, by=by)
            if lapsed is not None:
                self._unshow_override(lapsed, why, status, now_ms, last_dirty_ms)
            log.info("override_deleted", app=app, instance_id=instance_id, instance="gone")
            dirty = last_dirty_ms
        else:
            lease = self._live_lease(app, instance_id, now_ms)
            lease.hold(now_ms)
            removed = self.overrides.remove(
                app, instance_id, _O.DELETED, now_ms=now_ms, at_ms=at_ms, by=by
            )
            if removed is not None:
                self._unshow_override(lease, why, status, now_ms, last_dirty_ms)
                log.info("override_deleted", app=app, instance_id=instance_id, status=status.value)
            dirty = lease.instance.last_dirty_ms
        if not is_replication:
            self._replicate(_A.DELETE_STATUS_OVERRIDE, app, instance_id, status, dirty, at_ms)

    def take_unknown(
        self, app: str, instance_id: str, *, now_ms: int, last_dirty_ms: int | None
    ) -> None:
        """A stock peer's StatusUpdate naming UNKNOWN (its admin's PUT of UNKNOWN, which Eureka
        holds as an override of UNKNOWN): any override goes, and the instance is left UNKNOWN
        whether or not one was in force, so that its heartbeats answer 404 and its client
        registers again, as on the stock node. A replication: never sent on."""
        self.delete_status_override(
            app, instance_id, now_ms=now_ms, last_dirty_ms=last_dirty_ms, is_replication=True
        )
        lease = self._live_lease(app, instance_id, now_ms)
        if lease.instance.status is not _UNKNOWN:
            why = "a stock peer's admin set UNKNOWN"
            self._unshow_override(lease, why, _UNKNOWN, now_ms, last_dirty_ms)
            log.info("status_unknown_taken", app=app, instance_id=instance_id)

    def _lapsed_holder(self, app: str, instance_id: str, now_ms: int) -> Lease | None:
        """For the override of an instance no live lease in `app` holds: its lapsed lease, if
        any (which loses the override too, so that what is stored of the instance never
        carries one that is gone). One that another application's live instance holds is not
        this call's: UnknownInstance."""
        try:
            elsewhere = self.find(instance_id, now_ms=now_ms).instance.app
        except UnknownInstance:
            return self._apps.get(app, {}).get(instance_id)
        raise UnknownInstance(f"no instance {instance_id!r} in {app!r} (it is in {elsewhere!r})")

    def expire_override(self, instance_id: str, *, now_ms: int) -> str | None:
        """An override's expiry came: remove it as an admin's DELETE without a value would
        (status UNKNOWN, so the next heartbeat re-registers), without renewing the lease, even
        if it has lapsed, and send that to the peers. Returns the application of the instance
        it was on, or None when no instance holds the id (it was evicted: the override just
        goes)."""
        note = self.overrides.note_of(instance_id)
        # Removed as of its expiry, the same moment on every node.
        at_ms = note.expires_ms if note is not None and note.expires_ms is not None else now_ms
        lease = self._drop_override(instance_id, _O.EXPIRED, now_ms, at_ms)
        if lease is None:
            return None
        instance = lease.instance
        log.info("override_expired", app=instance.app, instance_id=instance_id)
        self._replicate(
            _A.DELETE_STATUS_OVERRIDE,
            instance.app,
            instance_id,
            _UNKNOWN,
            instance.last_dirty_ms,
            at_ms,
        )
        return instance.app

    def expire_due(self, *, now_ms: int) -> list[tuple[str, str]]:
        """Remove every override whose expiry has come (see `expire_override`); the
        (application, instance id) of each. Driven by the clock, once a second."""
        return [
            (self.expire_override(iid, now_ms=now_ms) or note.app, iid)
            for iid, note in self.overrides.expired(now_ms)
        ]

    async def expiring(self, clock: Clock) -> AsyncIterator[None]:
        """While the server runs: every second, the overrides whose expiry has come are
        removed, as an admin's DELETE would (status UNKNOWN)."""
        async with Loops(clock) as loops:
            loops.every(
                1.0, lambda: self.expire_due(now_ms=clock.wall_ms()), name="override_expiry"
            )
            yield

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
            if note.set_ms > ahead_ms or not self.overrides.older_than(
                iid, note.set_ms, note.status
            ):
                continue
            if self.overrides.get(iid) is note.status:  # the same decision: its newer note
                self.overrides.set(note.app, iid, note.status, note, at_ms=note.set_ms, by=note.by)
            else:
                self.overrides.set(note.app, iid, note.status, note, at_ms=now_ms, by=note.by)
                lease = self._apps.get(note.app, {}).get(iid)
                if lease is not None:
                    self._show_override(lease, note.status, now_ms, None)
            changed += 1
        for iid, app, at_ms in removals:
            if at_ms > ahead_ms or not self.overrides.older_than(iid, at_ms, None):
                continue
            if iid in self.overrides:
                self._drop_override(iid, _O.DELETED, now_ms, at_ms)
                log.info("override_deleted", app=app, instance_id=iid, by="peer")
                changed += 1
            else:
                self.overrides.notes.removed(iid, app, at_ms)
        return changed

    def _drop_override(
        self, instance_id: str, action: OverrideAction, now_ms: int, at_ms: int
    ) -> Lease | None:
        """Remove an override (removed as of `at_ms`) and leave its instance UNKNOWN, so that
        the next heartbeat re-registers; the instance's lease, None when no instance holds it."""
        if instance_id not in self.overrides:
            return None
        note = self.overrides.note_of(instance_id)
        lease = next(
            (found for leases in self._apps.values() if (found := leases.get(instance_id))),
            None,
        )
        app = lease.instance.app if lease is not None else note.app if note is not None else ""
        self.overrides.remove(app, instance_id, action, now_ms=now_ms, at_ms=at_ms)
        if lease is not None:
            why = "an override's expiry" if action is _O.EXPIRED else "a peer's override removal"
            self._unshow_override(lease, why, _UNKNOWN, now_ms, None)
        return lease

    def _show_override(
        self, lease: Lease, status: InstanceStatus, now_ms: int, last_dirty_ms: int | None
    ) -> None:
        """The instance under the override in force (a change, unless it already was)."""
        instance = lease.instance
        if instance.status is status and instance.overridden_status is status:
            return
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
        log.info(
            "override_set", app=instance.app, instance_id=instance.instance_id, status=status.value
        )

    def _unshow_override(
        self,
        lease: Lease,
        why: str,
        status: InstanceStatus,
        now_ms: int,
        last_dirty_ms: int | None,
    ) -> None:
        """The instance without its override: `status` left behind it."""
        lease.decision = _admin(why, status)
        self._change(
            lease,
            now_ms,
            status=status,
            overridden_status=_UNKNOWN,
            last_dirty_ms=max(lease.instance.last_dirty_ms, last_dirty_ms or 0),
        )
