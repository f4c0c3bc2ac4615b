"""What the parts of `Registry` call of it, declared once for the type checker.

`Registry` (core/registry.py) is put together from parts, each a base of the class in a file
of its own: core/override_commands.py, core/check_commands.py, core/removals.py and
core/warm_restart.py. A part calls some of the registry's own methods; `RegistryPart`, the base
of every part, declares them here (under TYPE_CHECKING: nothing of it exists at run time), and
core/registry.py defines them. Each part annotates the registry's state it uses itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from registry.core.model import ActionType, InstanceInfo, InstanceStatus, Lease, ReplicationAction


class RegistryPart:
    if TYPE_CHECKING:

        def register(
            self,
            instance: InstanceInfo,
            *,
            now_ms: int,
            is_replication: bool = False,
            last_renewal_ms: int | None = None,
            carried: bool = False,
        ) -> InstanceInfo: ...
        def renew(
            self,
            app: str,
            instance_id: str,
            now_ms: int,
            is_replication: bool = False,
            last_dirty_ms: int | None = None,
            overridden_status: InstanceStatus | None = None,
        ) -> None: ...
        def find(self, instance_id: str, *, now_ms: int) -> Lease: ...
        def _holds(self, app: str, instance_id: str, now_ms: int) -> bool: ...
        def _live_lease(self, app: str, instance_id: str, now_ms: int) -> Lease: ...
        def _change(self, lease: Lease, now_ms: int, **fields: Any) -> None: ...
        def _emit(
            self, action: ActionType, lease: Lease, now_ms: int, previous: InstanceInfo | None
        ) -> None: ...
        def _replicate(
            self,
            action: ReplicationAction,
            app: str,
            instance_id: str,
            status: InstanceStatus | None = None,
            last_dirty_ms: int | None = None,
            at_ms: int | None = None,
        ) -> None: ...
