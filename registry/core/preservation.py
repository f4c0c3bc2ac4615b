"""Self-preservation: hold eviction when leases stop renewing as if the network failed.

When many leases stop renewing at once it is likelier that this node lost its clients' network
than that they all died, so eviction waits. Eureka's rule (contract 8): eviction runs while the
renewals of the last counting window `R` are above `T = int(p x E)`, `E` the renewals expected
in a window and `p` the percent (0.85). What we count differs, so that the rule holds on a
cluster and for any lease settings, and no client can game it:

* `E` is what the leases deliver, not what they claim. A lease weighs the lower of its claim
  (window / its renewal interval) and the renewals it sent per window from its registration
  here to its last renewal, over at least a window (a burst weighs no more than it sent) and
  over the last `horizon` of its life at most (`weight`). A lease that stops renewing keeps its
  weight: silence is the evidence, not a reason to expect less. A registration never renewed
  weighs nothing; a copy of a lease that was renewing (restored from the store, taken from a
  peer) weighs its claim until it has been here for a window.
* `R` counts each lease's renewals up to one more than its weight (what a window's edge can
  add), so that a lease renewing faster than it says cannot hide other leases' silence.
* A lease evicted here keeps its weight in `E` (`departed`) until a recount accepts the drop, as
  in Eureka; a cancel (a client saying goodbye) takes it out at the next window's count. A
  peer's eviction is evidence for this node, never an order: its own eviction takes such
  leases, by this rule (`Registry.bury`), so no node loses more than its own cap, however many
  peers evict.
* Eviction also waits while the leases evicted since the last accepted recount and those
  expired now weigh `1 - p` of `E` or more: with leases much shorter than the window, a mass
  expiry shows there before a window's renewals are counted.

Every `recount_interval` (15 min) a recount accepts the departed weight when the leases in the
registry still weigh more than `p x E` (Eureka's 15 % rule); a drop that held eviction through
a whole recount interval is accepted as a scale-down, and its silent leases stop weighing.
Below `min_instances` none of this applies: one crash in a small registry is a large share.

Pure: the eviction task (core/eviction.py) counts the leases at each window's end (`Tally`),
reports what it finds expired and what it evicts, and asks for the verdict.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from registry.core.model import InstanceInfo, Lease

MINUTE = 60.0  # Eureka's window for counting renewals, the default of `window`
EUREKA_INTERVAL = 30.0  # Eureka's expected renewal interval
# A lease renewed within this many of its intervals is renewing: it missed two heartbeats at most.
RECENT_INTERVALS = 3
HISTORY = 30  # counting windows kept for the page's chart


def renewal_threshold(expected_per_window: float, percent: float) -> int:
    """`T`: the renewals per window at or below which eviction is held (contract 8)."""
    return int(expected_per_window * percent)


def expiration_enabled(threshold: int, renewals: int) -> bool:
    """Whether the renewals counted allow eviction: above a threshold, or nothing expected
    (Eureka holds at `T = 0`, so that an empty registry's first clients are never evicted)."""
    return threshold <= 0 or renewals > threshold


def recount_accepted(counted: float, expected: float, percent: float) -> bool:
    """Whether a recount may replace the expectation: a drop of `1 - percent` or more is not."""
    return counted > percent * expected


def interval_of(instance: InstanceInfo) -> float:
    """The seconds between the renewals a client says it sends (Eureka's 30 when it says none)."""
    seconds = instance.renewal_interval_secs
    return float(seconds) if seconds > 0 else EUREKA_INTERVAL


def weight(lease: Lease, window_ms: int) -> float:
    """The renewals per window `lease` is expected to send: the lower of its claim and what it
    sent, measured from its registration here (or the start of its last stretch) to its last
    renewal, over at least a window."""
    claim = window_ms / (interval_of(lease.instance) * 1000)
    span = lease.last_renewal_ms - lease.counted_from_ms + lease.earlier_ms
    if lease.carried and span < window_ms:
        return claim  # a copy of a renewing lease, not yet renewing here for a window
    return min(claim, (lease.renewals + lease.earlier_renewals) * window_ms / max(window_ms, span))


def renews_recently(lease: Lease, now_ms: int) -> bool:
    """Whether `lease` is a client still renewing: renewed within RECENT_INTERVALS."""
    return now_ms - lease.last_renewal_ms <= RECENT_INTERVALS * interval_of(lease.instance) * 1000


def forget(lease: Lease) -> None:
    """A silent lease stops weighing (a lasting drop accepted): counted again from its next
    renewal, if it renews."""
    lease.counted_from_ms = lease.renewals = lease.renewals_seen = 0
    lease.earlier_renewals = lease.earlier_ms = 0
    lease.carried = False


class Tally:
    """One window's count, lease by lease: what the leases weigh and what they renewed.

    Counting a lease also moves its measure on: the renewals it sent are marked seen, and a
    stretch of half the horizon becomes the earlier one, the one before it dropped.
    """

    def __init__(self, window_ms: int, horizon_ms: int) -> None:
        self._window_ms = window_ms
        self._half_horizon_ms = horizon_ms // 2
        self.expected = 0.0  # the leases' weights
        self.clients = 0  # leases that weigh something
        self.renewals = 0  # their renewals, each up to one more than its weight

    def add(self, lease: Lease) -> None:
        w = weight(lease, self._window_ms)
        sent = lease.renewals + lease.earlier_renewals
        if w:
            self.expected += w
            self.clients += 1
        self.renewals += min(sent - lease.renewals_seen, int(w) + 1)
        stretch = lease.last_renewal_ms - lease.counted_from_ms
        if lease.counted_from_ms and stretch >= self._half_horizon_ms:
            lease.earlier_renewals, lease.earlier_ms = lease.renewals, stretch
            lease.counted_from_ms, lease.renewals = lease.last_renewal_ms, 0
            sent = lease.earlier_renewals
        lease.renewals_seen = sent


@dataclass(frozen=True, slots=True)
class Verdict:
    evict: bool
    reason: str
    guarding: bool = True  # whether self-preservation applies to the registry now


class SelfPreservation:
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
        self.window_ms = round(window * 1000)
        # A lease's rate is measured over the last stretch of its life: a recount interval.
        self.horizon_ms = max(round(recount_interval * 1000), 2 * self.window_ms)
        self.accept_lasting_drop = accept_lasting_drop
        # What the leases in the registry weigh, as of the last window's count (less those
        # evicted since), and how many weigh something.
        self.expected_live = 0.0
        self.clients = 0
        # Leases evicted since the last accepted recount, and what they weighed.
        self.departed = 0.0
        self.departed_clients = 0
        self.renewals_last_minute: int | None = None  # None until a full window is counted
        # What the last sweep found expired: how many, what they weigh, how many a peer
        # evicted, and how many of them it kept.
        self.expired = 0
        self.expired_weight = 0.0
        self.expired_on_peers = 0
        self.expired_held = 0
        # The last windows' renewals and the threshold at their end, oldest first (the page's
        # chart of the last half hour).
        self.history: deque[tuple[int, int]] = deque(maxlen=HISTORY)
        self.paused_since: float | None = None  # monotonic seconds
        self.last_recount: str = "none yet"

    # Inputs ------------------------------------------------------------------------------

    def tally(self) -> Tally:
        """A count for the window ending now: `add` every lease, then `end_window`."""
        return Tally(self.window_ms, self.horizon_ms)

    def end_window(self, tally: Tally) -> None:
        """The window's count is done: its weights are the expectation, its renewals `R`."""
        self.expected_live, self.clients = tally.expected, tally.clients
        self.renewals_last_minute = tally.renewals
        self.history.append((tally.renewals, self.threshold()))

    def found_expired(self, count: int, weight_: float, on_peers: int) -> None:
        """What a sweep found expired: how many leases, their weight, how many a peer evicted."""
        self.expired, self.expired_weight, self.expired_on_peers = count, weight_, on_peers
        self.expired_held = count

    def evicted(self, weight_: float) -> None:
        """A lease weighing `weight_` was evicted here: it weighs on, as departed, until a
        recount accepts the drop."""
        self.expected_live = max(0.0, self.expected_live - weight_)
        self.departed += weight_
        if weight_:
            self.clients = max(0, self.clients - 1)
            self.departed_clients += 1
        self.expired_held = max(0, self.expired_held - 1)

    def recount(self) -> None:
        """The periodic recount: accept the departed weight, unless it is a drop of `1 - p`
        or more of the expectation (then it weighs on). A drop that needs the live count
        (`needs_live_count`) is accepted by `accept_lasting_drop` instead."""
        departed = self.departed_clients
        if (
            not self.enabled
            or not self.departed
            or recount_accepted(self.expected_live, self.expected_per_minute(), self.percent)
        ):
            self.departed, self.departed_clients = 0.0, 0
            self.last_recount = (
                f"accepted {self.clients} leases weighing {self.expected_live:.1f} renewals "
                f"a {self._minute()}"
                + (f" ({departed} evicted since the last)" if departed else "")
            )
            return
        self.last_recount = (
            f"refused: {departed} leases evicted since the last accepted recount weigh "
            f"{self.departed:.1f} of the {self.expected_per_minute():.1f} renewals expected, a "
            f"drop of {100 * (1 - self.percent):g} % or more"
        )

    def lasting_drop(self, *, now: float, silent: int, silent_weight: float) -> None:
        """Eviction has been held for a whole recount interval: the drop is a scale-down. The
        caller has made the `silent` leases (not renewing recently) stop weighing (`forget`);
        the departed stop weighing too. Called only while eviction is held
        (`needs_live_count`), under the eviction task's lock, so `paused_since` is set."""
        assert self.paused_since is not None
        held_for = now - self.paused_since
        self.expected_live = max(0.0, self.expected_live - silent_weight)
        self.clients = max(0, self.clients - silent)
        self.departed, self.departed_clients = 0.0, 0
        self.last_recount = (
            f"accepted a lasting drop to {self.clients} renewing leases "
            f"(eviction had been held for {held_for / MINUTE:.0f} min)"
        )

    # Outputs -----------------------------------------------------------------------------
    # Methods rather than properties: mutation testing leaves decorated functions alone.

    def expected_clients(self) -> int:
        """Leases that weigh something, the evicted ones not yet accepted included."""
        return self.clients + self.departed_clients

    def expected_per_minute(self) -> float:
        """`E`: the renewals expected in a window (a minute, unless the window was shortened)."""
        return self.expected_live + self.departed

    def threshold(self) -> int:
        return renewal_threshold(self.expected_per_minute(), self.percent)

    def allowance(self) -> float:
        """The weight that may be lost to expiry before a recount: `1 - p` of `E`."""
        return (1 - self.percent) * self.expected_per_minute()

    def _minute(self) -> str:
        """The counting window in words: Eureka's "minute", or the seconds a test set."""
        return "minute" if self.window == MINUTE else f"{self.window:g} s"

    def needs_live_count(self, now: float) -> bool:
        """Whether the next recount may accept a lasting drop, and so needs the leases."""
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
        renewals, threshold = self.renewals_last_minute, self.threshold()
        if renewals is None:
            return Verdict(False, f"counting renewals: the first {self._minute()} is not over yet")
        resumes = "Eviction resumes when renewals recover" + (
            f", or at a recount once the drop has lasted {self.recount_interval / MINUTE:g} min"
            if self.accept_lasting_drop
            else ""
        )
        if not expiration_enabled(threshold, renewals):
            return Verdict(
                False,
                f"{renewals} renewals in the last {self._minute()}, not above the threshold of "
                f"{threshold} ({self.percent:g} of the {self.expected_per_minute():.1f} expected "
                f"from {self.expected_clients()} leases): many leases stopped renewing at once, "
                f"which looks like a network failure rather than instances dying. {resumes}",
            )
        lost = self.departed + self.expired_weight
        if self.expired_weight and lost >= self.allowance():
            return Verdict(
                False,
                f"{self.expired} leases have expired and {self.departed_clients} were evicted "
                f"since the last accepted recount: they weigh {lost:.1f} of the "
                f"{self.expected_per_minute():.1f} renewals a {self._minute()} expected, "
                f"{100 * (1 - self.percent):g} % or more, which looks like a network failure "
                f"rather than instances dying. {resumes}",
            )
        return Verdict(
            True,
            f"{renewals} renewals in the last {self._minute()}, above the threshold of {threshold}",
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
            "expected-clients": self.expected_clients(),
            "expected-renews-per-minute": round(self.expected_per_minute(), 3),
            "departed-clients": self.departed_clients,
            "departed-renews-per-minute": round(self.departed, 3),
            "renews-threshold": self.threshold(),
            "renews-last-minute": self.renewals_last_minute,
            "renewal-percent-threshold": self.percent,
            "expired": self.expired,
            "expired-held": self.expired_held,
            "expired-on-peers": self.expired_on_peers,
            "held-for-seconds": (
                None if self.paused_since is None else round(now - self.paused_since)
            ),
            "last-recount": self.last_recount,
        }
