"""The checks this node runs: every instance that asks for one (registry/checks/spec.py) and
that this node is the one to check (registry/checks/owner.py: one node per instance among those
that answer; the verdicts replicate), on its own schedule, started with jitter (a deploy's
instances, registered together, are not checked together), at most `checks.rate`
started a second (registry/checks/pacing.py), `checks.rate_per_address` towards one
address, and `checks.concurrency` running at once, each bounded by its timeout. A check
that cannot start before its next one is due is skipped, and counted by why (`stats.skipped`):
its address's rate, the node's rate (behind), or its last check still running. Where a check
may go is registry/checks/destinations.py's to say; how many instances one client credential
may have checked, registry/checks/quota.py's.

`checks.failures` failures in a row hold the instance DOWN, `checks.successes`
successes in a row release it (`Registry.check_failed` / `check_passed`: the core decides
what the instance shows, core/checks.py). A registration that changes what the check asks
for starts its count afresh; a removed instance is checked no more.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from registry.checks.destinations import Destinations, own_addresses
from registry.checks.owner import owner
from registry.checks.pacing import AddressSlots, node_bucket
from registry.checks.probe import Outcome, probe
from registry.checks.quota import CheckQuota
from registry.checks.spec import CheckSpec, check_spec
from registry.common.clock import Clock
from registry.common.tasks import Loops, Pacer, wait_set
from registry.core.app_checks import AppCheck
from registry.core.checks import CHECK_KEY
from registry.core.model import ActionType, ChangeEvent, InstanceInfo
from registry.core.registry import Registry
from registry.core.subscriber import Loaded, Subscriber
from registry.errors import BadInput, UnknownInstance
from registry.health.histogram import Histogram
from registry.settings import Settings

log = structlog.get_logger()

# Why a check was not run (CheckStats.skipped), as /metrics and the page list them
SKIP_REASONS = ("address_rate", "behind", "still_running", "credential_limit")
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 30.0)


@dataclass(slots=True)
class Checked:
    app: str
    instance_id: str
    spec: CheckSpec
    failures: int = 0  # in a row
    successes: int = 0  # in a row
    last: Outcome | None = None
    last_at_ms: int = 0
    running: bool = False
    due_at: float = 0.0  # monotonic: when its check fell due (a later turn keeps it)
    has_turn: bool = False  # waits for the turn at its address it took


@dataclass(slots=True)
class CheckStats:
    checks: int = 0
    failures: int = 0
    errors: int = 0  # checks that failed for a fault of this node's (logged)
    # Checks not run, by why: address_rate, behind, still_running (and credential_limit:
    # registrations refused a check, see quota.py)
    skipped: Counter[str] = field(default_factory=Counter)
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))


class Checker(Subscriber):
    def __init__(
        self,
        registry: Registry,
        clock: Clock,
        settings: Settings,
        *,
        members: Callable[[], Sequence[str]] = lambda: (),
        rng: random.Random | None = None,
    ) -> None:
        self._registry = registry
        self._members = members  # the nodes that answer, by epoch (peers/cluster.py)
        self._clock = clock
        self._settings = settings
        self._rng = rng or random.Random()
        self.checked: dict[str, Checked] = {}  # by instance id
        # Instances an admin's check on their application cannot be run for, and why; those
        # of them a check held DOWN are let go (from `run`: not while the registry tells).
        self.unchecked: dict[str, str] = {}
        self._let_go: dict[str, str] = {}  # instance id -> application
        self._due: list[tuple[float, int, Checked]] = []  # (when, order, what)
        self._order = 0
        self._wake = asyncio.Event()
        self._bucket = node_bucket(settings.checks.rate, clock.monotonic())
        self._addresses = AddressSlots(settings.checks.rate_per_address)
        self.destinations = Destinations(settings)
        self.quota = CheckQuota(per_credential=settings.checks.max_per_credential)
        self._running: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(settings.checks.concurrency)
        self.stats = CheckStats()
        # Which instances this node checks, as of the members it was worked out for: a hash
        # each (about 2 us) is worked out again only when the members change.
        self._owned: dict[str, bool] = {}
        self._owned_for: tuple[str, ...] = ()

    async def running(self) -> AsyncIterator[None]:
        """Checks started as they come due while the server runs; this node's own addresses
        are found first, so that they are refused as destinations before any check runs."""
        await self.find_own_addresses()
        async with Loops(self._clock) as loops:
            loops.start(self.run, name="health_checks")
            yield

    async def find_own_addresses(self) -> None:
        """This node's own addresses, refused as destinations from now on (once, at start:
        it resolves the machine's name, off the loop)."""
        found = await asyncio.to_thread(own_addresses, self._settings.server.host)
        self.destinations.know_own(found)
        log.debug("own_addresses_found", addresses=sorted(found))

    def admit(self, instance: InstanceInfo, user: str | None) -> bool:
        """Refuse (BadInput, LimitReached) a registration asking for a check this node would
        not run, or one past its client credential's quota (`user`: None for an admin's);
        whether it asks for a check the quota counts (call `asked` once it is taken)."""
        check_spec(instance, self.destinations, self._settings)
        if user is None or CHECK_KEY not in instance.metadata:
            return False
        try:
            self.quota.admit(user, instance.instance_id)
        except Exception:
            self.stats.skipped["credential_limit"] += 1
            raise
        return True

    # What the registry tells ----------------------------------------------------------------

    def on_change(self, event: ChangeEvent) -> None:
        instance = event.lease.instance
        iid = instance.instance_id
        if event.action is ActionType.DELETED:
            self.checked.pop(iid, None)
            self.unchecked.pop(iid, None)
            self._owned.pop(iid, None)
            self.quota.forget(iid)
            return
        if iid in self.quota and CHECK_KEY not in instance.metadata:
            self.quota.forget(iid)
        if iid not in self.checked and not self._registry.asks_check(instance):
            return  # most instances: no check asked for, none known
        self._consider(instance)

    def on_load(self, registry: Loaded) -> None:
        self.checked.clear()
        self.unchecked.clear()
        self._due.clear()
        # A restart of 100 000, most asking for none: a key looked up each, no more.
        for app, leases in registry.applications():
            checked_app = app in registry.app_checks
            for lease in leases:
                if checked_app or CHECK_KEY in lease.instance.metadata:
                    self._consider(lease.instance)

    def on_app_check(self, app: str, check: AppCheck | None) -> None:
        """An admin's check on `app` came, changed or went: its instances' checks follow."""
        for lease in self._registry.application(app):
            self._consider(lease.instance)

    def _consider(self, instance: InstanceInfo) -> None:
        """Check `instance` as it now asks (a replaced check starts its count afresh)."""
        iid = instance.instance_id
        known = self.checked.get(iid)
        spec = self._spec(instance)
        if spec is None:
            if known is not None:
                del self.checked[iid]
        elif known is None or known.spec != spec:
            checked = self.checked[iid] = Checked(instance.app, iid, spec)
            self._schedule(checked, self._rng.uniform(0, spec.interval))

    def _spec(self, instance: InstanceInfo) -> CheckSpec | None:
        app_check = self._registry.app_checks.get(instance.app)
        self.unchecked.pop(instance.instance_id, None)
        try:
            return check_spec(instance, self.destinations, self._settings, app_check)
        except (BadInput, ValueError) as refused:
            # A peer's copy or a stored one this node would not have taken (another node's
            # settings, or this one's before a restart); or an instance its application's
            # check cannot reach (no healthCheckUrl, an address checks may not go to): told
            # to the admin (status/explain, the page).
            self.unchecked[instance.instance_id] = str(refused)
            if instance.instance_id in self._registry.checks:  # nothing would release it
                self._let_go[instance.instance_id] = instance.app
                self._wake.set()
            return None

    def _schedule(self, checked: Checked, delay: float) -> None:
        """`checked` falls due in `delay` seconds: one entry per `Checked`, so a replaced one
        (a re-registration, another spec) leaves no second chain behind."""
        self._order += 1
        checked.has_turn = False
        checked.due_at = self._clock.monotonic() + delay
        heapq.heappush(self._due, (checked.due_at, self._order, checked))
        self._wake.set()

    def _current(self, checked: Checked) -> bool:
        return self.checked.get(checked.instance_id) is checked

    # Running ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Start checks as they come due, until cancelled (running checks are cancelled too)."""
        try:
            while True:
                await self._start_due()
        finally:
            for task in self._running:
                task.cancel()
            await asyncio.gather(*self._running, return_exceptions=True)
            # A task cancelled before it ran never released its slot: start afresh, should
            # this loop be run again.
            self._slots = asyncio.Semaphore(self._settings.checks.concurrency)
            for checked in self.checked.values():
                checked.running = False

    async def _start_due(self) -> None:
        while self._let_go:
            iid, app = self._let_go.popitem()
            if iid in self.unchecked:  # still out of reach
                self._registry.let_go(app, iid, now_ms=self._clock.wall_ms())
        if not self._due:
            self._wake.clear()
            await wait_set(self._clock, self._wake, 60.0)
            return
        when, _, checked = self._due[0]
        wait = when - self._clock.monotonic()
        if wait > 0:
            self._wake.clear()
            await wait_set(self._clock, self._wake, wait)
            return
        heapq.heappop(self._due)
        if not self._current(checked):
            return  # gone, or asking for another check (scheduled on its own)
        interval = checked.spec.interval
        if not self.checks_here(checked.instance_id):  # another node's: its verdicts come here
            checked.failures = checked.successes = 0
            self._schedule(checked, interval)
            return
        if checked.running:  # still running its last check: come again next interval
            self._skip(checked, "still_running")
            return
        now, when = self._clock.monotonic(), checked.due_at
        if now - when >= interval:  # the node's rate kept it waiting a whole interval
            self._skip(checked, "behind")
            return
        if not checked.has_turn:  # a turn at its address, before its next check is due
            turn = self._addresses.take(checked.spec.address, now, when + interval)
            if turn is None:
                self._skip(checked, "address_rate")
                return
            if turn > now:  # later: it waits for its turn (still due when it was)
                checked.has_turn = True
                self._order += 1
                heapq.heappush(self._due, (turn, self._order, checked))
                return
        checked.has_turn = False
        await self._take_token()
        await self._slots.acquire()
        if not self._current(checked):  # gone while this waited for its turn
            self._slots.release()
            return
        checked.running = True
        self._schedule(checked, interval)
        task = asyncio.create_task(self._check(checked), name=f"check {checked.instance_id}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def verdicts(self) -> dict[str, tuple[str, bool]]:
        """The instances this node checks and has a verdict on, with their application and
        whether their check holds them: what peers take as the last word (peers/merge.py).
        An instance is listed free only once its own checks here have passed as often as a
        release takes: a node that has just taken a check over knows nothing yet. Paced: a
        node may check 100 000 instances."""
        checks, pacer = self._registry.checks, Pacer()
        enough = self._settings.checks.successes
        found = {}
        for iid, checked in list(self.checked.items()):
            held = iid in checks
            if (held or checked.successes >= enough) and self.checks_here(iid):
                found[iid] = (checked.app, held)
            await pacer.pace()
        return found

    def checks_here(self, instance_id: str) -> bool:
        """Whether this node is the one that checks the instance (registry/checks/owner.py)."""
        members = tuple(self._members())
        if len(members) < 2:
            return True
        if members != self._owned_for:
            self._owned, self._owned_for = {}, members
        owned = self._owned.get(instance_id)
        if owned is None:
            owned = self._owned[instance_id] = owner(instance_id, members) == self._registry.epoch
        return owned

    async def _take_token(self) -> None:
        """At most `checks.rate` checks started a second (pacing.py)."""
        while wait := self._bucket.wait(self._clock.monotonic()):
            await self._clock.sleep(wait)

    def _skip(self, checked: Checked, why: str) -> None:
        """Not checked this time, and why (counted); due again at its next interval."""
        self.stats.skipped[why] += 1
        self._schedule(checked, checked.spec.interval)

    async def _check(self, checked: Checked) -> None:
        try:
            outcome = await probe(checked.spec, self._clock)
        except Exception:
            # A fault of ours, not the instance's: no verdict on it, but said and counted.
            self.stats.errors += 1
            log.exception("check_error", app=checked.app, instance_id=checked.instance_id)
            return
        finally:
            checked.running = False
            self._slots.release()
        self._record(checked, outcome)

    def _record(self, checked: Checked, outcome: Outcome) -> None:
        stats = self.stats
        stats.checks += 1
        stats.latency.record(outcome.seconds)
        checked.last, checked.last_at_ms = outcome, self._clock.wall_ms()
        if self.checked.get(checked.instance_id) is not checked:
            return  # gone, or asking for another check meanwhile
        settings, registry = self._settings, self._registry
        now_ms = self._clock.wall_ms()
        try:
            if outcome.healthy:
                checked.failures, checked.successes = 0, checked.successes + 1
                held = checked.instance_id in registry.checks
                if held and checked.successes >= settings.checks.successes:
                    registry.check_passed(checked.app, checked.instance_id, now_ms=now_ms)
                    log.info("check_passed", app=checked.app, instance_id=checked.instance_id)
                return
            stats.failures += 1
            checked.successes, checked.failures = 0, checked.failures + 1
            if checked.failures >= settings.checks.failures:
                changed = registry.check_failed(
                    checked.app, checked.instance_id, outcome.detail, now_ms=now_ms
                )
                if changed:
                    log.info(
                        "check_failed",
                        app=checked.app,
                        instance_id=checked.instance_id,
                        detail=outcome.detail,
                        failures=checked.failures,
                    )
        except UnknownInstance:
            pass  # its lease ran out: its removal (an event) ends its checks

    # Reading ---------------------------------------------------------------------------------

    def status_of(self, instance_id: str) -> dict[str, Any] | None:
        """The instance's check, for status/explain and the status page."""
        checked = self.checked.get(instance_id)
        if checked is None:
            refused = self.unchecked.get(instance_id)
            return None if refused is None else {"notCheckable": refused}
        last = checked.last
        app_check = self._registry.app_checks.get(checked.app)
        return {
            "check": checked.spec.describe(),
            # An admin's check on the application, or the one the instance's metadata asks.
            "setOn": "instance" if app_check is None else "application",
            "setBy": None if app_check is None else app_check.by,
            "setAt": None if app_check is None else app_check.set_ms,
            "checkedHere": self.checks_here(instance_id),
            "interval": checked.spec.interval,
            "timeout": checked.spec.timeout,
            "failuresInARow": checked.failures,
            "successesInARow": checked.successes,
            "lastResult": None if last is None else last.detail,
            "lastHealthy": None if last is None else last.healthy,
            "lastCheckedAt": checked.last_at_ms or None,
        }


async def released(registry: Registry, clock: Clock) -> AsyncIterator[None]:
    """With checks off (checks.enabled = false): the holds a store or a peer kept would never be
    released, so they go as the server starts, and each instance's own claim decides again."""
    now_ms = clock.wall_ms()
    for lease in list(registry.leases()):
        registry.let_go(lease.instance.app, lease.instance.instance_id, now_ms=now_ms)
    for iid, _ in registry.checks.items():  # of instances not here
        registry.checks.release(iid)
    yield
