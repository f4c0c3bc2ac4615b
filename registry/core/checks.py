"""Server-side health checks as the core sees them: which instances a check holds DOWN.

A check's verdict is the instance's own status as far as the rule chain is concerned: while
a check holds an instance DOWN, the chain is asked with DOWN as its claim, so DownOrStarting
decides (as it does for a client that says it is DOWN, over any override); when the check
passes again, the chain is asked with the client's own claim, so an admin's override stands
where it did (a check's recovery never puts an instance an admin took out back in service).

The client's own claim is kept here while the check holds the instance, and updated by its
re-registrations meanwhile, so the recovery restores what the client last said. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.core.model import InstanceInfo, InstanceStatus

# An instance registered by an admin for something that cannot heartbeat (a database, a
# legacy service) carries `registry.lease = server`: the registry holds its lease, so silence
# never evicts it (its check marks it DOWN), and only an admin removes it.
SERVER_LEASE_KEY = "registry.lease"
CHECK_KEY = "registry.check"  # the metadata key an instance asks for a check with
HELD_FOREVER_MS = 2**62  # a lease's grace that no clock reaches


def held_by_server(instance: InstanceInfo) -> bool:
    return instance.metadata.get(SERVER_LEASE_KEY) == "server"


@dataclass(slots=True)
class HeldDown:
    claim: InstanceStatus  # what the client says of itself meanwhile
    since_ms: int
    detail: str  # the check's last failure, for status/explain


class CheckVerdicts:
    """Instance id -> the check holding it DOWN."""

    def __init__(self) -> None:
        self._held: dict[str, HeldDown] = {}

    def __contains__(self, instance_id: object) -> bool:
        return instance_id in self._held

    def __len__(self) -> int:
        return len(self._held)

    def items(self) -> list[tuple[str, HeldDown]]:
        return list(self._held.items())

    def get(self, instance_id: str) -> HeldDown | None:
        return self._held.get(instance_id)

    def hold(self, instance_id: str, claim: InstanceStatus, detail: str, now_ms: int) -> bool:
        """Hold the instance (or note the check's latest failure); whether it is a new hold."""
        held = self._held.get(instance_id)
        if held is None:
            self._held[instance_id] = HeldDown(claim, now_ms, detail)
            return True
        held.detail = detail
        return False

    def claimed(
        self, instance_id: str, claim: InstanceStatus, is_replication: bool
    ) -> InstanceStatus:
        """A registration while held: the chain is asked with DOWN, and a client's claim is
        kept for the recovery (a peer's copy may carry a check's DOWN, no client's claim)."""
        held = self._held.get(instance_id)
        if held is None:
            return claim
        if not is_replication:
            held.claim = claim
        return InstanceStatus.DOWN

    def take(self, instance_id: str, held: HeldDown | None) -> HeldDown | None:
        """A peer's word on the instance (a replicated registration carries it): held as it
        says, or not held; what was held here before."""
        before = self._held.pop(instance_id, None)
        if held is not None:
            self._held[instance_id] = held
        return before

    def release(self, instance_id: str) -> InstanceStatus | None:
        """The check passes again (or the instance went): the client's claim, if held."""
        held = self._held.pop(instance_id, None)
        return None if held is None else held.claim
