"""Self-preservation: hold eviction when renewals drop as if the network failed (contract 8).

When many leases stop renewing at once it is more likely that this node lost its clients'
network than that they all died, so eviction waits. The arithmetic is Eureka's:

* `E`, the expected clients, starts at 1 (as Spring's server does), goes up by one for every
  brand-new registration and down by one for every cancel or eviction;
* the threshold `T = int(E x 60 / interval x percent)` renewals per minute;
* `R`, the renewals (client and replicated) counted in the last complete minute;
* eviction runs while `T > 0 and R > T`;
* every recount interval (15 min) `E` is recounted from the registry, and a count that is not
  above `percent x E` (a drop of 15 % or more) is refused.

Where we differ, and why:

* a lease counts as a client from its first renewal, not its registration: twenty
  registrations with a renewal interval of a second that never renewed raised the
  expectation by 1 200 renewals a minute and held eviction for good. A client that renews
  once and stops is a client that died, which the recount below settles;
* each client counts with its own renewal interval: one renewing every 10 s is expected to
  send 6 renewals a minute, not 2, so its extra renewals cannot hide other clients' silence;
* below `min_instances` it does not apply: in a small registry one crash is a large fraction,
  and Eureka's version of this rule keeps dead instances forever;
* a drop that lasts (eviction held through a whole recount interval) is accepted at the
  recount as a scale-down, counting only the leases still renewing (renewed within
  RECENT_INTERVALS of their own intervals, whatever their lease duration); Eureka holds
  forever.
* registrations count even when `E` fell to 0 (Eureka stops counting until the next recount,
  which disables eviction after a registry empties).

The minute is `window` (the `renewal_window` setting, Eureka's 60 s by default, shorter only
where a test must not wait for minutes): every "per minute" here is per window.

Pure: the eviction task feeds it the registry's changes, renewal totals and the time.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

from registry.core.model import ActionType, ChangeEvent, InstanceInfo, Lease
from registry.core.subscriber import Subscriber

if TYPE_CHECKING:
    from registry.core.registry import Registry

MINUTE = 60.0  # Eureka's window for counting renewals, the default of `window`
EUREKA_INTERVAL = 30.0  # Eureka's expected renewal interval
_RENEWAL_SECONDS = attrgetter("instance.renewal_interval_secs")
_INITIAL = {EUREKA_INTERVAL: 1}  # the one client Spring's server expects before any registers
# A lease renewed within this many of its intervals is renewing: it missed two heartbeats at most.
RECENT_INTERVALS = 3


HISTORY = 30  # counting windows kept for the page's chart


def renewal_threshold(expected_per_minute: float, percent: float) -> int:
    """`T`: the renewals per minute below which eviction is held (contract 8)."""
    return int(expected_per_minute * percent)


def expiration_enabled(threshold: int, renewals: int) -> bool:
    """Eureka's `isLeaseExpirationEnabled` with self-preservation on."""
    return threshold > 0 and renewals > threshold


def recount_accepted(counted_per_minute: float, expected_per_minute: float, percent: float) -> bool:
    """Whether a recount may replace the expectation: a drop of `1 - percent` or more is not."""
    return counted_per_minute > percent * expected_per_minute


@dataclass(frozen=True, slots=True)
class Verdict:
    evict: bool
    reason: str
    guarding: bool = True  # whether self-preservation applies to the registry now


class SelfPreservation(Subscriber):
    def __init__(
        self,
        *,
        enabled: bool = True,
        percent: float = 0.85,
        min_instances: int = 10,
        recount_interval: float = 15 * MINUTE,
        accept_lasting_drop: bool = True,
        window: float = MINUTE,
    ) -> None:
        self.enabled = enabled
        self.percent = percent
        self.min_instances = min_instances
        self.recount_interval = recount_interval
        self.window = window  # seconds renewals are counted over: the "minute"
        self.accept_lasting_drop = accept_lasting_drop
        # Clients by renewal interval: E is their total, the expectation their renewal rate.
        self._expected: Counter[float] = Counter(_INITIAL)
        # Every lease in the registry that has renewed, by interval: the count a recount takes.
        self._registered: Counter[float] = Counter()
        self.renewals_last_minute: int | None = None  # None until a full minute is counted
        # The last windows' renewals and the threshold at their end, oldest first (the page's
        # chart of the last half hour).
        self.history: deque[tuple[int, int]] = deque(maxlen=HISTORY)
        self._renewals_at_minute_start = 0
        self._uncounted_before_ms = 0  # leases dead at an accepted lasting drop: not in E
        self.paused_since: float | None = None  # monotonic seconds
        self.last_recount: str = "none yet"

    # Inputs ------------------------------------------------------------------------------

    @staticmethod
    def interval_of(instance: InstanceInfo) -> float:
        seconds = instance.renewal_interval_secs  # the decoder makes it 30 when not given
        return float(seconds) if seconds > 0 else EUREKA_INTERVAL

    @staticmethod
    def renews_recently(lease: Lease, now_ms: int) -> bool:
        """Whether `lease` is a client still renewing: renewed within RECENT_INTERVALS."""
        interval_ms = SelfPreservation.interval_of(lease.instance) * 1000
        return lease.renewed and now_ms - lease.last_renewal_ms <= RECENT_INTERVALS * interval_ms

    def on_first_renewal(self, lease: Lease) -> None:
        """Registry hook: a lease renewed for the first time is a client from now on."""
        interval = self.interval_of(lease.instance)
        self._registered[interval] += 1
        self._expected[interval] += 1

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: clients removed lower the expectation; a client registering
        again with another interval moves to it. Leases that never renewed were never
        counted."""
        lease, previous = event.lease, event.previous
        if not lease.renewed:
            return
        interval = self.interval_of(lease.instance)
        if event.action is ActionType.DELETED:
            self._registered[interval] -= 1
            if lease.last_renewal_ms + lease.duration_ms >= self._uncounted_before_ms:
                _decrement(self._expected, interval)
        elif (
            event.action is ActionType.ADDED
            and previous is not None
            and self.interval_of(previous) != interval  # the same client, a new interval
        ):
            self._registered[self.interval_of(previous)] -= 1
            self._registered[interval] += 1
            _decrement(self._expected, self.interval_of(previous))
            self._expected[interval] += 1

    def on_load(self, registry: Registry) -> None:
        """Registry hook after a bulk load into an empty registry: every restored lease was
        a client renewing before the restart."""
        # Counted by the seconds clients gave first, in C: a warm restart loads 100 000.
        renewed = (lease for lease in registry.leases() if lease.renewed)
        for seconds, count in Counter(map(_RENEWAL_SECONDS, renewed)).items():
            interval = float(seconds) if seconds > 0 else EUREKA_INTERVAL  # as interval_of
            self._registered[interval] += count
            self._expected[interval] += count

    def end_minute(self, renewals_total: int) -> None:
        """Called every `window` seconds with the registry's running renewal total."""
        self.renewals_last_minute = renewals_total - self._renewals_at_minute_start
        self._renewals_at_minute_start = renewals_total
        self.history.append((self.renewals_last_minute, self.threshold))

    def recount(self, *, now: float, now_ms: int, renewing: Iterable[InstanceInfo]) -> None:
        """The periodic recount of `E` from the registry.

        `renewing` (the instances whose leases have not expired) is read only when a drop has
        held eviction for a whole recount interval: see `needs_live_count`.
        """
        if self.needs_live_count(now):
            live = Counter(self.interval_of(instance) for instance in renewing)
            held_for = 0.0 if self.paused_since is None else now - self.paused_since
            self._expected = live or Counter(_INITIAL)
            # The leases already dead now are not in E, so evicting them must not lower it. (One
            # that renews again later and is then removed does lower it: E runs low until the
            # next recount, which accepts any rise.)
            self._uncounted_before_ms = now_ms
            self.last_recount = (
                f"accepted a lasting drop to {live.total()} renewing leases "
                f"(eviction had been held for {held_for / MINUTE:.0f} min)"
            )
            return
        counted = _per_window(self._registered, self.window)
        if not self.enabled or recount_accepted(counted, self.expected_per_minute, self.percent):
            self._expected = +self._registered or Counter(_INITIAL)
            self._uncounted_before_ms = 0
            self.last_recount = f"accepted {self._registered.total()} leases"
            return
        self.last_recount = (
            f"refused {self._registered.total()} leases: a drop from {self.expected_clients} "
            f"of {100 * (1 - self.percent):g} % or more"
        )

    # Outputs -----------------------------------------------------------------------------

    @property
    def expected_clients(self) -> int:
        return sum(self._expected.values())

    @property
    def expected_per_minute(self) -> float:
        """The renewals expected in a window (a minute, unless the window was shortened)."""
        return _per_window(self._expected, self.window)

    @property
    def threshold(self) -> int:
        return renewal_threshold(self.expected_per_minute, self.percent)

    @property
    def _minute(self) -> str:
        """The counting window in words: Eureka's "minute", or the seconds a test set."""
        return "minute" if self.window == MINUTE else f"{self.window:g} s"

    def needs_live_count(self, now: float) -> bool:
        """Whether the next recount may accept a lasting drop, and so needs the renewing leases."""
        return (
            self.enabled
            and self.accept_lasting_drop
            and self.paused_since is not None
            and now - self.paused_since >= self.recount_interval
        )

    def judge(self, registry_size: int) -> Verdict:
        """Whether eviction may run now, and why."""
        if not self.enabled:
            return Verdict(True, "self-preservation is disabled", guarding=False)
        if registry_size < self.min_instances:
            noun = "instance" if registry_size == 1 else "instances"
            return Verdict(
                True,
                f"{registry_size} {noun} registered, fewer than the {self.min_instances} "
                "where self-preservation applies",
                guarding=False,
            )
        renewals, threshold = self.renewals_last_minute, self.threshold
        if renewals is None:
            return Verdict(False, f"counting renewals: the first {self._minute} is not over yet")
        if expiration_enabled(threshold, renewals):
            return Verdict(
                True,
                f"{renewals} renewals in the last {self._minute}, above the threshold of "
                f"{threshold}",
            )
        return Verdict(
            False,
            f"{renewals} renewals in the last {self._minute}, not above the threshold of "
            f"{threshold} "
            f"({self.percent:g} of the {self.expected_per_minute:g} expected from "
            f"{self.expected_clients} clients): many leases stopped renewing at once, which "
            "looks like a network failure rather than instances dying. Eviction resumes when "
            "renewals recover"
            + (
                f", or at a recount once the drop has lasted {self.recount_interval / MINUTE:g} min"
                if self.accept_lasting_drop
                else ""
            ),
        )

    def note(self, verdict: Verdict, now: float) -> bool:
        """Remember since when eviction has been held; whether the verdict changed."""
        held = not verdict.evict
        changed = held != (self.paused_since is not None)
        if changed:
            self.paused_since = now if held else None
        return changed

    def status(self, registry_size: int, now: float) -> dict[str, object]:
        """The inputs and the verdict, for `GET status` and metrics."""
        verdict = self.judge(registry_size)
        return {
            "enabled": self.enabled,
            "evicting": verdict.evict,
            "reason": verdict.reason,
            "registry-size": registry_size,
            "min-instances": self.min_instances,
            "expected-clients": self.expected_clients,
            "expected-renews-per-minute": round(self.expected_per_minute, 3),
            "renews-threshold": self.threshold,
            "renews-last-minute": self.renewals_last_minute,
            "renewal-percent-threshold": self.percent,
            "held-for-seconds": (
                None if self.paused_since is None else round(now - self.paused_since)
            ),
            "last-recount": self.last_recount,
        }


def _per_window(clients: Counter[float], window: float) -> float:
    return sum(count * (window / interval) for interval, count in clients.items() if count > 0)


def _decrement(clients: Counter[float], interval: float) -> None:
    """One client fewer, never below none (as Eureka's `if (E > 0) E--`)."""
    if clients[interval] > 0:
        clients[interval] -= 1
    elif clients.total() > 0:  # counted at another interval before a recount: take any
        for key, count in clients.items():
            if count > 0:
                clients[key] -= 1
                return
