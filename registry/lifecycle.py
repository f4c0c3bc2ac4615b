"""The server's life, as phases with the moves allowed between them.

STARTING -> RESTORING -> SYNCING -> SERVING -> DRAINING -> STOPPED, skipping RESTORING when
there is no store to restore from and SYNCING when there is no peer to copy from (or the store
restored the registry); a start that fails drains from wherever it got to.

- STARTING: made, not yet listening.
- RESTORING: reading the store's state back (a warm restart).
- SYNCING: copying the registry from peers before serving reads (contract 11.5, 15): an empty
  answer would make clients drop every instance they know. Registrations, heartbeats and
  replication are served meanwhile; registry reads answer 403 with the reason.
- SERVING: everything is served.
- DRAINING: shutting down: watches and long-polls are ended, what the store is owed is written.
- STOPPED: done.

A node told to stop may first serve on while it is `leaving` (still SERVING, but not ready:
registry/serving.py). Readiness (`/readyz`), `GET status`, the status page, the registry reads
and the watch streams all read the phase from here. A move the table does not allow raises
`InvalidTransition`: a phase never goes back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from enum import StrEnum

import structlog

from registry.errors import NotSynced

log = structlog.get_logger()


class Phase(StrEnum):
    STARTING = "STARTING"
    RESTORING = "RESTORING"
    SYNCING = "SYNCING"
    SERVING = "SERVING"
    DRAINING = "DRAINING"
    STOPPED = "STOPPED"


_P = Phase
ALLOWED: dict[Phase, frozenset[Phase]] = {
    _P.STARTING: frozenset({_P.RESTORING, _P.SYNCING, _P.SERVING, _P.DRAINING}),
    _P.RESTORING: frozenset({_P.SYNCING, _P.SERVING, _P.DRAINING}),
    _P.SYNCING: frozenset({_P.SERVING, _P.DRAINING}),
    _P.SERVING: frozenset({_P.DRAINING}),
    _P.DRAINING: frozenset({_P.STOPPED}),
    _P.STOPPED: frozenset(),
}


class InvalidTransition(Exception):
    """A move the phase table does not allow: a bug in whoever asked for it."""


class Lifecycle:
    def __init__(self) -> None:
        self.phase = Phase.STARTING
        self.reason = "starting"
        self.leaving = ""  # why this node, still serving, is no longer ready ("": it is)
        self._on_enter: dict[Phase, list[Callable[[], None]]] = {}

    def move(self, to: Phase, reason: str) -> None:
        """Enter phase `to`, saying why; to the phase it is in, only the reason changes."""
        if to is not self.phase:
            if to not in ALLOWED[self.phase]:
                raise InvalidTransition(f"{self.phase} -> {to} is not a move the server makes")
            log.info("phase_entered", phase=to.value, previous=self.phase.value, reason=reason)
            self.phase = to
            for call in self._on_enter.get(to, ()):
                call()
        self.reason = reason

    async def running(self) -> AsyncIterator[None]:
        """The server's whole run (the first of its background contexts, so that it ends last):
        STOPPED once everything else has stopped. A start that failed or was stopped drains
        first."""
        yield
        if self.phase is not Phase.DRAINING:
            self.move(Phase.DRAINING, f"stopped while {self.phase.value}: {self.reason}")
        self.move(Phase.STOPPED, "stopped")

    async def drain(self) -> None:
        """The server is shutting down: DRAINING, which ends long-polls and watch streams (see
        `on_enter`) so that they do not hold the shutdown up."""
        self.move(Phase.DRAINING, "shutting down")

    def leave(self, reason: str) -> None:
        """The node is going: still serving, no longer ready."""
        log.info("leaving", reason=reason)
        self.leaving = reason

    def on_enter(self, phase: Phase, call: Callable[[], None]) -> None:
        """Call `call` when the server enters `phase`."""
        self._on_enter.setdefault(phase, []).append(call)

    def still_syncing(self, reason: str) -> None:
        """Why reads still wait for the peers' registry (while SYNCING; else nothing)."""
        if self.phase is Phase.SYNCING:
            self.reason = reason

    def synced(self, reason: str) -> None:
        """The registry has been copied from peers (or need not be): serve reads, if this
        node was waiting to. The first reason given is the one kept."""
        if self.phase is Phase.SYNCING:
            self.move(Phase.SERVING, reason)

    @property
    def serves_reads(self) -> bool:
        return self.phase in (Phase.SERVING, Phase.DRAINING)

    def check_reads(self) -> None:
        """Raise NotSynced (403) while registry reads are not served."""
        if not self.serves_reads:
            raise NotSynced(f"this node is not serving registry reads yet: {self.reason}")
