"""Per-application digests, for anti-entropy: two nodes with equal digests for an application
hold the same instances with the same statuses, overrides and lastDirtyTimestamps.

Lease times are left out (each node renews on its own clock). The digest is a stable hash
(BLAKE2b over a canonical text), never Python's `hash`, which differs between processes. The
whole map is kept until the registry index moves, so a quiet cluster pays nothing to compare.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from registry.core import Registry
from registry.model import LeaseRecord


class Digests:
    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._index = -1
        self._digests: dict[str, str] = {}

    def current(self) -> dict[str, str]:
        """Application name -> digest of its instances, for the registry as it is now."""
        if self._index != self._registry.index:
            self._digests = {name: digest(leases) for name, leases in self._registry.applications()}
            self._index = self._registry.index
        return self._digests


def digest(leases: Iterable[LeaseRecord]) -> str:
    rows = sorted(
        f"{i.instance_id}\0{i.status.value}\0{i.overridden_status.value}\0{i.last_dirty_ms}"
        for i in (lease.instance for lease in leases)
    )
    return hashlib.blake2b("\n".join(rows).encode(), digest_size=12).hexdigest()
