"""Who this node's peers are: the `peers` setting (a SIGHUP may change it) and what DNS last
answered for `peers.dns_name`, with the changes that came of them.

A peer that DNS stops naming is kept for `peers.dns_grace` after it was last named: a node that
restarts on its address, or a lookup that answers from a server not yet up to date, does not
cost its queue. (A Kubernetes pod made anew usually has a new address: it is a new peer, and
its old address goes after the grace; anti-entropy brings the new one level.)
A lookup that fails changes nothing: the last peers stay (a DNS outage is no reason to stop
replicating), and the failure is kept for `GET status`, the log and /metrics.

Pure: times are passed in (monotonic seconds for the grace, wall milliseconds for what is
shown).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CHANGES_KEPT = 50  # the latest membership changes, for the status page


@dataclass(slots=True)
class DnsLookups:
    """What the lookups of `peers.dns_name` gave so far."""

    name: str
    lookups: int = 0
    failures: int = 0  # in all
    failing_since_ms: int | None = None  # the first of the failures in a row, if failing now
    last_success_ms: int | None = None
    last_error: str = ""
    found: tuple[str, ...] = ()  # the URLs the last answer named (this node's own left out)
    max_peers: int = 16  # at most this many of them are taken (`peers.dns_max_peers`)
    dropped: int = 0  # how many more the last answer named, beyond max_peers
    refused: dict[str, int] = field(default_factory=dict)  # its addresses no peer can have

    @property
    def answered(self) -> bool:
        """DNS has answered at least once."""
        return self.lookups > self.failures

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "answered": self.answered,
            "lookups": self.lookups,
            "failures": self.failures,
            "failingSince": self.failing_since_ms,
            "lastSuccessTimestamp": self.last_success_ms,
            "lastError": self.last_error,
            "found": list(self.found),
            "maxPeers": self.max_peers,
            "dropped": self.dropped,
            "refused": dict(self.refused),
        }


@dataclass(slots=True)
class Membership:
    grace: float
    static: tuple[str, ...] = ()
    dns: DnsLookups | None = None
    # URL -> when DNS last named it (monotonic seconds)
    _seen: dict[str, float] = field(default_factory=dict)
    changes: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=CHANGES_KEPT))

    def urls(self) -> list[str]:
        """Every peer: the static ones first, in their order, then those from DNS."""
        return list(dict.fromkeys((*self.static, *self._seen)))

    def found(
        self,
        urls: Iterable[str],
        now: float,
        wall_ms: int,
        *,
        refused: dict[str, int] | None = None,
    ) -> None:
        """DNS answered with `urls` (in a stable order), and refused `refused`: the first
        `max_peers` are peers, the rest are counted; one it no longer names goes after the
        grace."""
        assert self.dns is not None, "no peers.dns_name to look up"
        named = tuple(dict.fromkeys(urls))
        dns = self.dns
        dns.dropped = max(len(named) - dns.max_peers, 0)
        dns.refused = dict(refused or {})
        named = named[: dns.max_peers]
        for url in named:
            self._seen[url] = now
        for url, seen in list(self._seen.items()):
            if now - seen > self.grace:
                del self._seen[url]
        dns.lookups += 1
        dns.found = named
        dns.last_success_ms = wall_ms
        dns.failing_since_ms = None

    def failed(self, error: str, wall_ms: int) -> None:
        """A lookup failed: the peers stay as they are."""
        assert self.dns is not None, "no peers.dns_name to look up"
        dns = self.dns
        dns.lookups += 1
        dns.failures += 1
        dns.last_error = error
        if dns.failing_since_ms is None:
            dns.failing_since_ms = wall_ms

    def leaving(self, now: float) -> list[dict[str, Any]]:
        """Peers DNS no longer names, with the seconds left before they are dropped."""
        named = set(self.dns.found) if self.dns else set()
        return [
            {"peer": url, "secondsLeft": round(max(self.grace - (now - seen), 0.0), 1)}
            for url, seen in self._seen.items()
            if url not in named and url not in self.static
        ]

    def changed(self, change: str, url: str, why: str, wall_ms: int) -> None:
        """Remember that `url` was "added" or "removed", and why."""
        self.changes.append({"timestamp": wall_ms, "change": change, "peer": url, "why": why})

    def status(self, now: float) -> dict[str, Any]:
        return {
            "configured": list(self.static),  # the `peers` setting
            "dns": None if self.dns is None else self.dns.status(),
            "leaving": self.leaving(now),
            "changes": list(reversed(self.changes)),
        }
