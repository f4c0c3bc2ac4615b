"""The server's connections: counted per client address and capped, and the process's file
limit raised to what the system allows.

Without a cap, 1 100 idle sockets from one address (no bytes, no credentials) took every file
descriptor of a 1 024 limit, and legitimate clients were reset with nothing logged (uvloop
accepts and closes at once when it runs out, silently). Now one address holds at most
`limits.max_connections_per_address` connections (those beyond are closed as they open), a
connection that sends no request head in `limits.request_head_timeout` is closed (`serving`), and
running near the file limit is logged. Behind a reverse proxy every client has the proxy's
address: raise the cap there, or turn it off (0).
"""

from __future__ import annotations

import resource
import time
from collections import Counter

import structlog

log = structlog.get_logger()

WARN_EVERY = 60.0  # seconds between two warnings of the same kind
NEAR_LIMIT = 0.9  # of the file limit: open connections beyond this are worth a warning


def raise_file_limit() -> tuple[int, int]:
    """The soft limit on open files raised to the hard one; (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft >= hard:
        return soft, soft
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # not allowed here: keep what we have
        return soft, soft
    return soft, target


class Connections:
    """Open connections by client address, with the cap and what was refused."""

    def __init__(self, *, per_address: int) -> None:
        self.per_address = per_address  # 0: no cap
        self.open: Counter[str] = Counter()
        self.total = 0
        self.refused = 0  # connections closed as they opened, over an address's cap
        self.timed_out = 0  # closed for sending no request head in time
        self._warned: dict[str, float] = {}
        self._file_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    def admit(self, address: str) -> bool:
        """Count a new connection from `address`; False (not counted) when over the cap."""
        if self.per_address and self.open[address] >= self.per_address:
            self.refused += 1
            self._warn(
                "connections_refused",
                address=address,
                open=self.open[address],
                cap=self.per_address,
                refused=self.refused,
            )
            return False
        self.open[address] += 1
        self.total += 1
        if self.total >= NEAR_LIMIT * self._file_limit:
            self._warn("connections_near_file_limit", open=self.total, limit=self._file_limit)
        return True

    def release(self, address: str) -> None:
        self.open[address] -= 1
        if not self.open[address]:
            del self.open[address]
        self.total -= 1

    def head_timed_out(self, address: str) -> None:
        self.timed_out += 1
        self._warn("request_head_timed_out", address=address, timed_out=self.timed_out)

    def _warn(self, event: str, **fields: object) -> None:
        """`event` logged at most once every WARN_EVERY seconds, with the running counts."""
        now = time.monotonic()
        if now - self._warned.get(event, -WARN_EVERY) >= WARN_EVERY:
            self._warned[event] = now
            log.warning(event, **fields)
