"""Whether this node serves registry reads yet, and why not (contract 11.5, 15).

A node that starts with peers copies their registry before it answers fetches: an empty
answer would make clients drop every instance they know. Until then `apps`, `apps/delta`,
`apps/{app}` and the VIP reads answer 403 with the reason; registrations, heartbeats and
replication are served throughout.
"""

from __future__ import annotations

import structlog

from registry.errors import NotSynced

log = structlog.get_logger()


class ReadGate:
    def __init__(self) -> None:
        self.is_open = True
        self.reason = "serving"

    def close(self, reason: str) -> None:
        self.is_open = False
        self.reason = reason

    def open(self, reason: str) -> None:
        """Serve reads from now on; the first reason given is the one kept."""
        if not self.is_open:
            log.info("reads_opened", reason=reason)
            self.is_open = True
            self.reason = reason

    def restored(self, reason: str) -> None:
        """Reads are served from state the store kept: say so, whatever opened them before."""
        self.is_open = True
        self.reason = reason

    def check(self) -> None:
        """Raise NotSynced (403) while reads are not served."""
        if not self.is_open:
            raise NotSynced(f"this node is not serving registry reads yet: {self.reason}")
