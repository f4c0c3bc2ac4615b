"""How fast checks may start: a token bucket for all of a node's checks together, and one for
each address checked.

The node's bucket holds a hundredth of a second's checks (it used to hold a whole second's,
so a start with many instances due ran twice `checks.rate` in its first second). Checks
towards one address are spaced by at least 1 / `checks.rate_per_address`, however many
instances name that address; addresses whose turns are all past are forgotten. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

GLOBAL_BURST = 0.01  # seconds' worth of checks the node's bucket holds
PRUNE_AT = 10_000  # addresses kept before those free now are forgotten


@dataclass(slots=True)
class TokenBucket:
    rate: float  # tokens a second
    capacity: float
    tokens: float
    at: float  # when `tokens` was counted (monotonic seconds)

    @classmethod
    def started(cls, rate: float, capacity: float, now: float) -> TokenBucket:
        """A bucket with one token, or less when it holds less: no burst at the start."""
        return cls(rate, capacity, min(1.0, capacity), now)

    def wait(self, now: float) -> float:
        """Take a token, returning 0; or the seconds until one is there (nothing taken)."""
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


def node_bucket(rate: float, now: float) -> TokenBucket:
    return TokenBucket.started(rate, max(1.0, rate * GLOBAL_BURST), now)


class AddressSlots:
    """Turns at each address checked, `rate` a second: a check takes the address's next free
    turn, at least 1 / `rate` after the one before (the generic cell rate algorithm, with no
    burst), so a thousand instances naming one address queue there, each in a turn of its
    own, rather than all asking at every turn."""

    def __init__(self, rate: float) -> None:
        self.spacing = 1 / rate
        self._next: dict[str, float] = {}  # address -> its next free turn (monotonic)

    def __len__(self) -> int:
        return len(self._next)

    def take(self, address: str, now: float, before: float) -> float | None:
        """The turn at `address` taken for a check (now, or later), if there is one before
        `before`; None (nothing taken) if not."""
        turn = max(now, self._next.get(address, now))
        if turn >= before:
            return None
        if address not in self._next and len(self._next) >= PRUNE_AT:
            self._prune(now)
        self._next[address] = turn + self.spacing
        return turn

    def _prune(self, now: float) -> None:
        for address, turn in list(self._next.items()):
            if turn <= now:  # free now: the same as never checked
                del self._next[address]
