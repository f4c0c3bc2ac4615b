"""The registry's commands for server-side health checks: a check's verdicts holding an
instance DOWN and letting it go, and admins' checks on whole applications.

A part of `Registry` (one of its bases), kept in a file of its own so that each reads in one
sitting: the leases and their commands are in core/registry.py, the checks' state in
core/checks.py (which instances a check holds DOWN, and the claim their clients last made) and
core/app_checks.py (admins' checks by application); the checks themselves run in
registry/checks/, which calls these commands. A verdict is the claim the rule chain is asked
with, so a check decides an instance's status as its client's own claim would.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from registry.core.app_checks import AppCheck, AppChecks
from registry.core.checks import CHECK_KEY, CheckVerdicts, HeldDown
from registry.core.model import InstanceInfo, InstanceStatus, Lease, ReplicationAction
from registry.core.overrides import Overrides
from registry.core.part import RegistryPart
from rules import CHAIN, decide

log = structlog.get_logger()

_UP = InstanceStatus.UP
_A = ReplicationAction


def _client_claim(lease: Lease, override: InstanceStatus | None) -> InstanceStatus:
    """What the lease's client last said of itself, as the chain was last asked (its
    override's status says nothing of the client: taken as UP)."""
    decision = lease.decision
    claim = (
        lease.instance.status if decision is None or decision.claimed is None else decision.claimed
    )
    return _UP if override is not None and claim is override else claim


class CheckCommands(RegistryPart):
    # What these commands use of the registry's state (core/registry.py); its methods they
    # call are declared in core/part.py.
    overrides: Overrides
    checks: CheckVerdicts
    app_checks: AppChecks
    _apps: dict[str, dict[str, Lease]]
    _skew_ms: int
    _on_app_check: list[Callable[[str, AppCheck | None], None]]
    _on_hold: list[Callable[[Lease], None]]

    def check_failed(self, app: str, instance_id: str, detail: str, *, now_ms: int) -> bool:
        """A server-side check holds the instance DOWN (core/checks.py): the chain decides
        with DOWN as its claim. Whether its status changed (then replicated, as a
        registration: the status a client's re-registration would carry)."""
        lease = self._live_lease(app, instance_id, now_ms)
        override = self.overrides.get(instance_id)
        new = self.checks.hold(instance_id, _client_claim(lease, override), detail, now_ms)
        changed = self._restatus(lease, InstanceStatus.DOWN, override, now_ms)
        if new and not changed:
            self._hold_changed(lease)
        return changed

    def check_passed(
        self, app: str, instance_id: str, *, now_ms: int, replicate: bool = True
    ) -> bool:
        """The check no longer holds the instance: the chain decides with its client's own
        claim again. Whether its status changed. Without `replicate`, this node's alone (a
        node with checks off lets its own holds go, not its peers')."""
        if instance_id not in self.checks:
            return False
        lease = self._live_lease(app, instance_id, now_ms)  # UnknownInstance: still held
        return self._release(lease, now_ms, replicate=replicate)

    def let_go(self, app: str, instance_id: str, *, now_ms: int) -> bool:
        """Nothing will check the instance any more (checks off here, its check removed or
        out of reach): its hold goes, whether its lease has run out or not (a heartbeat may
        bring it back), and its client's own claim decides again. Here alone: every node
        decides so for itself. Whether its status changed."""
        lease = self._apps.get(app, {}).get(instance_id)
        if lease is None:
            self.checks.release(instance_id)
            return False
        if instance_id not in self.checks:
            return False
        return self._release(lease, now_ms, replicate=False)

    def take_hold(self, lease: Lease, held: HeldDown) -> None:
        """A peer's hold on an instance this node shows DOWN as it does, and holds not (a
        copy taken at start-up, or one whose hold was lost): held here too, so the check's
        recovery releases it wherever it runs."""
        self.checks.take(lease.instance.instance_id, held)
        self._hold_changed(lease)

    def _release(self, lease: Lease, now_ms: int, *, replicate: bool) -> bool:
        claim = self.checks.release(lease.instance.instance_id)
        assert claim is not None
        override = self.overrides.get(lease.instance.instance_id)
        changed = self._restatus(lease, claim, override, now_ms, replicate=replicate)
        if not changed:
            self._hold_changed(lease)
        return changed

    def _hold_changed(self, lease: Lease) -> None:
        for on_hold in self._on_hold:
            on_hold(lease)

    def asks_check(self, instance: InstanceInfo) -> bool:
        """Whether a server-side check applies to `instance`: one its metadata asks for, or
        an admin's on its application."""
        return CHECK_KEY in instance.metadata or instance.app in self.app_checks

    def set_app_check(self, check: AppCheck, *, now_ms: int, is_replication: bool = False) -> bool:
        """An admin's check on an application (core/app_checks.py), here or from a peer:
        taken when it is the later decision (a peer's from further ahead than the clock skew
        allowed never is: it would outrank every later call). Whether it was; an admin's call
        here goes to the peers either way (one may have missed the decision)."""
        if is_replication and check.set_ms > now_ms + self._skew_ms:
            return False
        taken = self.app_checks.take(check)
        if taken:
            log.info("app_check_set", app=check.app, check=check.kind, by=check.by)
            for on_app_check in self._on_app_check:
                on_app_check(check.app, check)
        if not is_replication:
            self._replicate(_A.APP_CHECK, check.app, "", at_ms=check.set_ms)
        return taken

    def remove_app_check(
        self, app: str, *, at_ms: int, now_ms: int, is_replication: bool = False
    ) -> bool:
        """The admin's check on `app` removed at `at_ms`, when that is the later decision: the
        instances it held DOWN that ask for no check of their own are released here (every
        node hears of the removal and releases its own). Whether it was taken."""
        if is_replication and at_ms > now_ms + self._skew_ms:
            return False
        if not self.app_checks.take_removal(app, at_ms):
            return False
        log.info("app_check_removed", app=app)
        for on_app_check in self._on_app_check:
            on_app_check(app, None)
        for lease in list(self._apps.get(app, {}).values()):
            if CHECK_KEY not in lease.instance.metadata:
                self.let_go(app, lease.instance.instance_id, now_ms=now_ms)
        if not is_replication:
            self._replicate(_A.APP_CHECK, app, "", at_ms=at_ms)
        return True

    def _restatus(
        self,
        lease: Lease,
        claim: InstanceStatus,
        override: InstanceStatus | None,
        now_ms: int,
        *,
        replicate: bool = True,
    ) -> bool:
        instance = lease.instance
        status, lease.decision = decide(CHAIN, claim, override, instance.status, False)
        if status is instance.status:
            return False
        self._change(lease, now_ms, status=status)
        if replicate:
            self._replicate(_A.REGISTER, instance.app, instance.instance_id)
        return True
