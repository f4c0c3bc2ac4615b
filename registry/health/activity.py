"""A periodic summary of what clients did, in place of a log line per registration.

At 100 000 instances a deploy registers thousands of instances a second; a line each cost an
eighth of the registry's CPU and buried everything else. Each instance's registration and
cancel is logged at debug level; at info level, one `registry_activity` line per interval says
how many registrations, cancels, evictions and renewals there were, and how large the registry
is, and nothing when nothing happened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import structlog

from registry.common.clock import Clock
from registry.common.tasks import Loops
from registry.core.registry import Registry

log = structlog.get_logger()


class Activity:
    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._last = self._counts()

    async def running(self, clock: Clock, interval: float) -> AsyncIterator[None]:
        """A summary every `interval` while the server runs, and the last one as it stops; the
        first counts from the start (what a warm restart loaded is not activity)."""
        self._last = self._counts()
        async with Loops(clock) as loops:
            loops.every(interval, self.log, name="activity")
            yield
        self.log()

    def _counts(self) -> dict[str, int]:
        r = self._registry
        return {
            "registrations": r.registrations,
            "cancels": r.cancels,
            "evictions": r.evictions,
            "renewals": r.renewals,
        }

    def summary(self) -> dict[str, int] | None:
        """What happened since the last summary; None when nothing did."""
        counts = self._counts()
        since = {name: counts[name] - self._last[name] for name in counts}
        self._last = counts
        if not any(since.values()):
            return None
        return {**since, "instances": len(self._registry)}

    def log(self) -> None:
        """Log the summary at info level, if there is one."""
        summary = self.summary()
        if summary is not None:
            log.info("registry_activity", **summary)
