"""What a watch stream cares about (`watch?apps=A,B&vips=v1`): the changes of the instances of
those applications, or that name one of those VIP addresses (plain or secure), and nothing
else. Its hashcode is Eureka's reconcile hash over those instances as they are now, what a
client that keeps only them computes over its copy (the same as `apps/{app}` for one
application, or `vips/{vip}` for one VIP address).
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.common.hashcode import reconcile_hash
from registry.core.model import InstanceInfo
from registry.core.registry import Registry
from registry.reads.catalog import Catalog

MAX_NAMES = 100  # applications and VIP addresses one stream may name


@dataclass(frozen=True, slots=True)
class Interest:
    apps: frozenset[str]
    vips: frozenset[str]

    def matches(self, instance: InstanceInfo) -> bool:
        if instance.app in self.apps:
            return True
        if not self.vips:
            return False
        return any(
            vip in self.vips
            for address in (instance.vip_address, instance.secure_vip_address)
            if address
            for vip in address.split(",")
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
