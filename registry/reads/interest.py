"""What a watch stream cares about (`watch?apps=A,B&vips=v1`): the changes of the instances of
those applications, or that name one of those VIP addresses (plain or secure), and nothing
else. Its hashcode is Eureka's reconcile hash over those instances as they are now, what a
client that keeps only them computes over its copy (the same as `apps/{app}` for one
application, or `vips/{vip}` for one VIP address). An instance that leaves a watched VIP
address is sent too (its event shows it without it), so a copy can drop it.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.common.hashcode import reconcile_hash
from registry.core.model import InstanceInfo
from registry.core.registry import Registry
from registry.reads.catalog import Catalog
from registry.reads.journal import Entry

MAX_NAMES = 100  # applications and VIP addresses one stream may name


@dataclass(frozen=True, slots=True)
class Interest:
    apps: frozenset[str]
    vips: frozenset[str]

    def matches(self, instance: InstanceInfo) -> bool:
        if instance.app in self.apps:
            return True
        return self._names_a_vip((instance.vip_address, instance.secure_vip_address))

    def wants(self, entry: Entry) -> bool:
        """Whether a stream with this interest is sent the change: of an instance it
        watches, or of one that has just left a VIP address it watches."""
        if self.matches(entry.lease.instance):
            return True
        return entry.left_vips is not None and self._names_a_vip(entry.left_vips)

    def _names_a_vip(self, addresses: tuple[str | None, str | None]) -> bool:
        if not self.vips:
            return False
        return any(
            vip in self.vips for address in addresses if address for vip in address.split(",")
        )

    def hashcode(self, registry: Registry, catalog: Catalog) -> str:
        """The reconcile hash over the instances this interest covers, as they are now."""
        names = set(self.apps)
        for vip in self.vips:
            for secure in (False, True):
                names.update(catalog.vip_applications(vip, secure=secure))
        return reconcile_hash(
            lease.instance.status
            for name in names
            for lease in registry.application(name)
            if self.matches(lease.instance)
        )
