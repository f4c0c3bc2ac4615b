"""What the core answers a peer's copy that loses: the two conflicts of replication.

Errors of the registry's tree (registry/errors.py), kept in the core because each carries
what won, for the peer to take: our newer copy of the instance, or our removal of it.
"""

from __future__ import annotations

from registry.core.model import Lease
from registry.core.tombstones import Tombstone
from registry.errors import RegistryError


class StaleReplica(RegistryError):
    def __init__(self, lease: Lease) -> None:
        super().__init__(
            f"{lease.instance.app}/{lease.instance.instance_id}: our copy is newer "
            f"(lastDirtyTimestamp {lease.instance.last_dirty_ms})"
        )
        self.lease = lease


class RemovedHere(RegistryError):
    """A peer's copy loses to this node's newer removal of the instance
    (registry/core/tombstones.py)."""

    def __init__(self, removal: Tombstone) -> None:
        super().__init__(
            f"{removal.app}/{removal.instance_id} was removed here at {removal.at_ms} "
            f"(lastDirtyTimestamp {removal.dirty_ms}), after the copy sent"
        )
        self.removal = removal
