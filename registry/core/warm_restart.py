"""The registry's warm restart: a store's overrides, removals, admins' checks and index taken
back (`restore`), then its instances, all at once (`load`).

A part of `Registry` (one of its bases), kept in a file of its own so that each reads in one
sitting: the leases and their commands are in core/registry.py; what a store holds is read in
registry/store/restore.py, which calls these two. A restored instance gets what `register`
would give it (core/registration.py), with no event each: the subscribers are told once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from registry.core.app_checks import AppCheck, AppChecks
from registry.core.checks import HELD_FOREVER_MS, held_by_server
from registry.core.model import ActionType, InstanceInfo, InstanceStatus, Lease
from registry.core.overrides import Note, Overrides
from registry.core.part import RegistryPart
from registry.core.registration import claim_of, registered
from registry.core.tombstones import Tombstone, Tombstones
from registry.errors import RegistryError
from rules import CHAIN, Decision, decide

log = structlog.get_logger()

_UP = InstanceStatus.UP
_UNKNOWN = InstanceStatus.UNKNOWN

_Decided = tuple[InstanceStatus, Decision]  # the chain's answer, and why


class WarmRestart(RegistryPart):
    # What these commands use of the registry's state (core/registry.py); its methods they
    # call are declared in core/part.py.
    overrides: Overrides
    tombstones: Tombstones
    app_checks: AppChecks
    index: int
    registrations: int
    _apps: dict[str, dict[str, Lease]]
    _statuses: Counter[InstanceStatus]
    _legacy: bool
    _on_load: list[Callable[[Any], None]]  # each is told the registry (a `Registry`)

    def load(
        self,
        instances: Iterable[InstanceInfo],
        *,
        now_ms: int,
        renewals: Iterable[int] | None = None,
        renewing: Iterable[bool] | None = None,
    ) -> int:
        """Register many instances at once into an empty registry, as registrations from a
        peer would (a warm restart of 100 000 instances). Each gets what `register` would give
        it, but there is no event: listeners are told once, by their `loaded` hook, and the
        index moves by one per instance as it would. Returns how many.

        `renewals` (one per instance, a store's): the leases keep these last renewals, which
        peers weigh against their removals, and get a lease duration from `now_ms` of grace
        to be renewed before eviction may take them. `renewing` (one per instance, a store's):
        whether each had been renewed, so that self-preservation expects it to renew (all,
        when not given)."""
        stored = iter(renewals) if renewals is not None else None
        renewed = iter(renewing) if renewing is not None else None
        if self._apps:
            raise RegistryError("a bulk load is for an empty registry")
        overrides = self.overrides
        # The chain's answer depends only on the claimed status and the override here (no
        # lease exists, and it counts as a replication): asked once per pair, not per instance.
        decisions: dict[tuple[InstanceStatus, InstanceStatus | None], _Decided] = {}
        count = 0
        for instance in instances:
            iid = instance.instance_id
            leases = self._apps.setdefault(instance.app, {})
            renewal = now_ms if stored is None else min(next(stored), now_ms)
            was_renewing = stored is not None and (renewed is None or next(renewed))
            if iid in leases:  # met twice: the second is a re-registration, as ever
                self.register(instance, now_ms=now_ms, is_replication=True)
                continue
            if instance.overridden_status is not _UNKNOWN and iid not in overrides:
                # A row carrying an override its store's table lacks (written by a release
                # that could leave them apart): in force, and told, so the store gets it back.
                overrides.take(instance.app, iid, instance.overridden_status, now_ms)
            override = overrides.get(iid)
            claimed = claim_of(instance)
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
                instance = registered(instance, status, override, now_ms)
            duration_ms = instance.duration_secs * 1000
            server_held = held_by_server(instance)
            leases[iid] = Lease(
                instance=instance,
                duration_ms=duration_ms,
                registration_ms=now_ms,
                last_renewal_ms=renewal,
                service_up_ms=now_ms if status is _UP else 0,
                decision=decision,
                grace_until_ms=(
                    HELD_FOREVER_MS
                    if server_held
                    else 0
                    if stored is None
                    else now_ms + duration_ms
                ),
                counted_from_ms=now_ms + (duration_ms if self._legacy else 0),
                # A lease the registry holds never renews: no client self-preservation expects
                renewed=was_renewing and not server_held,
                carried=was_renewing and not server_held,
            )
            self._statuses[status] += 1
            count += 1
        self.registrations += count
        self.index += count
        for on_load in self._on_load:
            on_load(self)
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
        app_checks: Iterable[AppCheck] = (),
        app_check_removals: Iterable[tuple[str, int]] = (),
    ) -> None:
        """Take a store's overrides, their notes, override removals, tombstones, admins'
        checks and index (a warm restart), before its instances come back: restored instances
        then show their overrides and get their checks, and the index never goes backwards.
        No subscriber is told: the store holds them already (see `load` for what its
        instances may carry beyond them)."""
        self.overrides.restore(overrides, notes, override_removals)
        for tombstone in tombstones:
            self.tombstones.put(tombstone)
        for check in app_checks:
            self.app_checks.take(check)
        for app, at_ms in app_check_removals:
            self.app_checks.take_removal(app, at_ms)
        self.index = max(self.index, index)
