"""The registry: the only owner of instances, leases and admin overrides.

Every command is a plain synchronous method that takes the time as an argument, so commands are
atomic with respect to each other on the event loop and never await. What they change is told
to the subscribers (registry/core/subscriber.py): each change of an instance as a
`ChangeEvent` with the next registry index, each change of an override as an `OverrideChange`,
and each command that came from a client or an admin here (not from a peer) to the replication
part, which sends it to the peers. Subscribers never reach into the dictionaries here.

This file holds the lease table, the commands clients send (register, renew, cancel, metadata)
and the reads. The other commands are in parts of their own, the bases of `Registry`:
core/override_commands.py (admins' overrides; their state in `overrides`),
core/check_commands.py (health checks' holds and admins' checks; in `checks`, `app_checks`),
core/removals.py (evictions, and peers' removals, copies and renewals; the removals
remembered in `tombstones`) and core/warm_restart.py (a store's state taken back at start).
What a registration makes of an instance is in core/registration.py.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import structlog
from msgspec.structs import replace

from registry.common.hashcode import hash_of_counts
from registry.core.app_checks import AppCheck, AppChecks
from registry.core.check_commands import CheckCommands
from registry.core.checks import HELD_FOREVER_MS, CheckVerdicts, held_by_server
from registry.core.conflicts import StaleReplica
from registry.core.model import (
    ActionType,
    ChangeEvent,
    InstanceInfo,
    InstanceStatus,
    Lease,
    ReplicationAction,
    check_metadata_size,
)
from registry.core.override_commands import OverrideCommands
from registry.core.overrides import OverrideAction, Overrides
from registry.core.registration import carry_counts, claim_of, registered
from registry.core.removals import Removals
from registry.core.subscriber import Subscriber, wanted
from registry.core.tombstones import Tombstone, Tombstones
from registry.core.warm_restart import WarmRestart
from registry.errors import AmbiguousInstance, LimitReached, UnknownInstance
from rules import CHAIN, decide

log = structlog.get_logger()

_UP = InstanceStatus.UP
_UNKNOWN = InstanceStatus.UNKNOWN
_A = ReplicationAction
_O = OverrideAction


class Registry(OverrideCommands, CheckCommands, Removals, WarmRestart):
    """Instances, their leases, the commands clients send on them and the reads; its bases
    hold the rest of its commands (see the module's docstring), on the state created here."""

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
        # Admins' decisions: read them here, change them only through the commands below.
        self.overrides = Overrides()
        # Instances server-side health checks hold DOWN (core/checks.py).
        self.checks = CheckVerdicts()
        # Admins' checks by application (core/app_checks.py).
        self.app_checks = AppChecks()
        self._on_app_check: list[Callable[[str, AppCheck | None], None]] = []
        self._on_hold: list[Callable[[Lease], None]] = []
        # Instances cancelled or evicted, so no copy of them comes back (core/tombstones.py).
        self.tombstones = Tombstones(
            retention_ms=tombstone_retention_ms, margin_ms=removal_margin_ms
        )
        self._skew_ms = max_clock_skew_ms  # how far ahead a peer's time may be taken
        # What clients may register (0: no cap); a peer's registrations are its own to cap.
        self._max_apps = max_applications
        self._max_per_app = max_instances_per_application
        # The subscribers' methods, by the news they take (see `subscribe`).
        self._on_change: list[Callable[[ChangeEvent], None]] = []
        self._on_load: list[Callable[[Registry], None]] = []
        self._on_first_renewal: list[Callable[[Lease], None]] = []
        self._on_replicate: list[Callable[..., None]] = []
        self._legacy = legacy_lease_expiry
        self._sync_dirty = sync_when_timestamp_differs
        self.index = 0
        # Names this run of the registry: an index means nothing to another node or run.
        self.epoch = secrets.token_hex(4)
        self.renewals = 0  # heartbeats accepted since start, client and replicated
        self.registrations = 0
        self.cancels = 0
        self.evictions = 0
        # Leases a peer evicted and this node holds, with their last renewal then: its own
        # eviction takes them first, when they have expired here too, have not renewed since,
        # and its self-preservation lets it (core/eviction.py).
        self.expired_on_peers: dict[tuple[str, str], int] = {}
        # Instances by status, kept by every change: the reconcile hash without a recount.
        self._statuses: Counter[InstanceStatus] = Counter()
        self._hash = (-1, "")  # (index, reconcile hash at that index)

    def subscribe(self, part: Subscriber) -> None:
        """Tell `part` from now on of the news it takes (the `Subscriber` methods it has)."""
        add: dict[str, Callable[[Any], None]] = {
            "on_change": self._on_change.append,
            "on_load": self._on_load.append,
            "on_override": self.overrides.listen,
            "on_app_check": self._on_app_check.append,
            "on_hold": self._on_hold.append,
            "on_first_renewal": self._on_first_renewal.append,
            "on_replicate": self._on_replicate.append,
        }
        for news in wanted(part):
            add[news](getattr(part, news))

    def _replicate(
        self,
        action: ReplicationAction,
        app: str,
        instance_id: str,
        status: InstanceStatus | None = None,
        last_dirty_ms: int | None = None,
        at_ms: int | None = None,
    ) -> None:
        """Hand a command that did not come from a peer to the replication part."""
        for on_replicate in self._on_replicate:
            on_replicate(action, app, instance_id, status, last_dirty_ms, at_ms)

    # Commands ----------------------------------------------------------------------------

    def register(
        self,
        instance: InstanceInfo,
        *,
        now_ms: int,
        is_replication: bool = False,
        last_renewal_ms: int | None = None,
        carried: bool = False,
    ) -> InstanceInfo:
        """Register or re-register an instance with a fresh lease (contract 6.2).

        `last_renewal_ms` backdates the lease, for a copy taken from a peer whose own lease is
        older: an instance that died there must not get a full new life here. `carried`: such
        a copy of a lease that was renewing there (self-preservation expects it to renew here
        too). What its client has delivered so far is kept through a re-registration. Logged
        at debug level: a deploy registers thousands a second (registry/health/activity.py
        sums them up).
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
            self.overrides.take(registrant.app, iid, registrant.overridden_status, now_ms)
        override = self.overrides.get(iid)
        claim = claim_of(registrant) if is_replication else registrant.status
        if iid in self.checks and not self.asks_check(registrant):
            self.checks.release(iid)  # it asks for no check any more: nothing would release it
        status, decision = decide(
            CHAIN,
            self.checks.claimed(iid, claim, is_replication) if len(self.checks) else claim,
            override,
            existing.instance.status if existing is not None else None,
            is_replication,
        )
        lease_ms = instance.duration_secs * 1000  # asked for by this call, as in Eureka
        lease = Lease(
            instance=registered(registrant, status, override, now_ms),
            duration_ms=lease_ms,
            registration_ms=now_ms,
            last_renewal_ms=now_ms if last_renewal_ms is None else min(last_renewal_ms, now_ms),
            service_up_ms=existing.service_up_ms if existing is not None else 0,
            decision=decision,
            counted_from_ms=now_ms + (lease_ms if self._legacy else 0),
            renewed=carried,
            carried=carried,
        )
        if existing is not None:
            carry_counts(existing, lease)
        if status is _UP and lease.service_up_ms == 0:
            lease.service_up_ms = now_ms
        if held_by_server(registrant):  # never expires for silence (core/checks.py)
            lease.grace_until_ms = HELD_FOREVER_MS
        leases[iid] = lease
        log.debug(
            "instance_registered",
            app=registrant.app,
            instance_id=iid,
            status=status.value,
            replication=is_replication,
        )
        self._emit(ActionType.ADDED, lease, now_ms, None if existing is None else existing.instance)
        if not is_replication:
            self._replicate(_A.REGISTER, registrant.app, iid)
        return lease.instance

    def _check_room(self, app: str, leases: dict[str, Lease] | None) -> None:
        if leases is None and self._max_apps and len(self._apps) >= self._max_apps:
            raise LimitReached(
                f"{len(self._apps)} applications are registered, limits.max_applications: {app!r} "
                "would be one more"
            )
        if leases is not None and self._max_per_app and len(leases) >= self._max_per_app:
            raise LimitReached(
                f"{app} has {len(leases)} instances, limits.max_instances_per_application"
            )

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
        override = self.overrides.get(instance_id)
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
        if lease.counted_from_ms:
            lease.renewals += 1
        else:  # forgotten at a lasting drop: what its client delivers is counted from now
            lease.counted_from_ms = lease.last_renewal_ms
        if not lease.renewed:  # once per lease: the store keeps that it renews
            lease.renewed = True
            for on_first_renewal in self._on_first_renewal:
                on_first_renewal(lease)
        if (
            last_dirty_ms is not None
            and last_dirty_ms != lease.instance.last_dirty_ms
            and self._sync_dirty
        ):
            self._compare_dirty(lease, last_dirty_ms, is_replication, overridden_status, now_ms)
        if not is_replication:
            for on_replicate in self._on_replicate:
                on_replicate(_A.HEARTBEAT, app, instance_id)

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
        if instance_id in self.overrides:
            self.overrides.tell(_O.INSTANCE_CANCELLED, app, instance_id, now_ms, by)
        log.debug(
            "instance_cancelled", app=app, instance_id=instance_id, replication=is_replication
        )
        if not is_replication:
            self._replicate(_A.CANCEL, app, instance_id)

    def update_metadata(
        self, app: str, instance_id: str, entries: Mapping[str, str], *, now_ms: int
    ) -> None:
        """Merge metadata and re-register as a client call, as Eureka does (contract 3.6)."""
        instance = self._live_lease(app, instance_id, now_ms).instance
        merged = {**instance.metadata, **entries}
        check_metadata_size(merged)
        self.register(replace(instance, metadata=merged), now_ms=now_ms)

    # Reads -------------------------------------------------------------------------------

    def get(self, app: str, instance_id: str, *, now_ms: int) -> Lease:
        """The live lease of one instance; an expired one counts as gone."""
        return self._live_lease(app, instance_id, now_ms)

    def instance_or_none(self, app: str, instance_id: str, *, now_ms: int) -> InstanceInfo | None:
        """The instance of a live lease, or None: `get` without the exception, for the
        replication sender, which asks once per item and peer."""
        lease = self._apps.get(app, {}).get(instance_id)
        return None if lease is None or lease.is_expired(now_ms) else lease.instance

    def keeps_ours(self, instance: InstanceInfo) -> bool:
        """Whether registering `instance` would keep the copy held here, which is newer (its
        lease run out or not: see `register`)."""
        lease = self._apps.get(instance.app, {}).get(instance.instance_id)
        return lease is not None and lease.instance.last_dirty_ms > instance.last_dirty_ms

    def find(self, instance_id: str, *, now_ms: int) -> Lease:
        """The live lease with this instance id, in whichever application holds it (the first
        found, where several do: for what is keyed by the id alone, as overrides are)."""
        for leases in self._apps.values():
            lease = leases.get(instance_id)
            if lease is not None and not lease.is_expired(now_ms):
                return lease
        raise UnknownInstance(f"no instance {instance_id!r}")

    def find_only(self, instance_id: str, *, now_ms: int) -> Lease:
        """The live lease with this instance id, which one application alone may hold. An id
        is unique within its application only: held by several, no answer is the right one
        (the first found would be whichever application came first: one that registered the
        id to answer for another's instance, say)."""
        found = [
            lease
            for leases in self._apps.values()
            if (lease := leases.get(instance_id)) is not None and not lease.is_expired(now_ms)
        ]
        if len(found) > 1:
            apps = ", ".join(sorted(lease.instance.app for lease in found))
            raise AmbiguousInstance(
                f"instance {instance_id!r} is held by {apps}: ask for apps/{{app}}/{{id}}"
            )
        if not found:
            raise UnknownInstance(f"no instance {instance_id!r}")
        return found[0]

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
                self.overrides.take(instance.app, instance.instance_id, overridden_status, now_ms)
                if self.overrides.get(instance.instance_id) is overridden_status:
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
        for on_change in self._on_change:
            on_change(event)
