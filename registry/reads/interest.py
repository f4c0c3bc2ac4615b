"""What a watch stream cares about (`watch?apps=A,B&vips=v1`): the changes of the instances of
those applications, or that name one of those VIP addresses (plain or secure), and nothing
else. Its hashcode is Eureka's reconcile hash over those instances as they are now, what a
client that keeps only them computes over its copy (the same as `apps/{app}` for one
application, or `vips/{vip}` for one VIP address). An instance that leaves a watched VIP
address is sent too (its event shows it without it), so a copy can drop it.

Interests are values: the same names in any order, case (of applications) or repetition are
one interest, which the fan-out serves as one subscription (registry/reads/fanout.py). A
hashcode costs the interest's names, not the instances behind them: `AppStatuses` keeps each
watched application's instances counted by status from the change events.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from registry.core.model import ActionType, ChangeEvent, InstanceInfo, InstanceStatus
from registry.core.registry import Registry
from registry.reads.catalog import Catalog
from registry.reads.journal import Entry

MAX_NAMES = 100  # applications and VIP addresses one stream may name


@dataclass(frozen=True, slots=True)
class Interest:
    apps: frozenset[str]  # upper case, as the registry keys applications
    vips: frozenset[str]

    def matches(self, instance: InstanceInfo) -> bool:
        if instance.app in self.apps:
            return True
        return bool(self.vips) and not self.vips.isdisjoint(
            _split((instance.vip_address, instance.secure_vip_address))
        )

    def wants(self, entry: Entry) -> bool:
        """Whether a stream with this interest is sent the change: of an instance it
        watches, or of one that has just left a VIP address it watches."""
        if entry.lease.instance.app in self.apps:
            return True
        return bool(self.vips) and not self.vips.isdisjoint(vips_of(entry))

    def counts(
        self, registry: Registry, catalog: Catalog, statuses: AppStatuses
    ) -> Counter[InstanceStatus]:
        """The instances this interest covers, as they are now, by status (their reconcile
        hash is its hashcode): the watched applications' counts, and the instances of other
        applications that name a watched VIP address one by one."""
        counts: Counter[InstanceStatus] = Counter()
        for app in self.apps:
            counts.update(statuses.of(app))
        others: set[str] = set()
        for vip in self.vips:
            for secure in (False, True):
                others.update(catalog.vip_applications(vip, secure=secure))
        counts.update(
            lease.instance.status
            for name in others - self.apps
            for lease in registry.application(name)
            if self.matches(lease.instance)
        )
        return counts


def vips_of(entry: Entry) -> set[str]:
    """Every VIP address a change concerns: its instance's, plain and secure, and those the
    change has just taken it off."""
    instance = entry.lease.instance
    names = _split((instance.vip_address, instance.secure_vip_address))
    if entry.left_vips is not None:
        names.update(_split(entry.left_vips))
    return names


def vips_of_change(event: ChangeEvent) -> set[str]:
    """Every VIP address a change touches: its instance's, before and after."""
    instance, previous = event.lease.instance, event.previous
    names = _split((instance.vip_address, instance.secure_vip_address))
    if previous is not None:
        names.update(_split((previous.vip_address, previous.secure_vip_address)))
    return names


def _split(addresses: tuple[str | None, str | None]) -> set[str]:
    return {vip for address in addresses if address for vip in address.split(",")}


class AppStatuses:
    """The instances of each application some interest's hashcode has counted, by status,
    kept up to date from the change events (an application is counted from the registry the
    first time it is asked for). Only applications with instances are kept, so names that
    streams ask for and that have none cost nothing, however many."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._counts: dict[str, Counter[InstanceStatus]] = {}

    def of(self, app: str) -> Counter[InstanceStatus]:
        counts = self._counts.get(app)
        if counts is None:
            counts = Counter(lease.instance.status for lease in self._registry.application(app))
            if counts:
                self._counts[app] = counts
        return counts

    def on_change(self, event: ChangeEvent) -> None:
        previous = event.previous
        if previous is not None and (counts := self._counts.get(previous.app)) is not None:
            counts[previous.status] -= 1
            if not counts.total():
                del self._counts[previous.app]
        instance = event.lease.instance
        counts = self._counts.get(instance.app)
        if counts is not None and event.action is not ActionType.DELETED:
            counts[instance.status] += 1

    def clear(self) -> None:
        """Forget every count (after a bulk load): each is taken again when next asked for."""
        self._counts.clear()

    def __len__(self) -> int:
        return len(self._counts)
