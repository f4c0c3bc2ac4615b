"""The delta journal: what changed recently, for `GET apps/delta` (contract 9).

It subscribes to the registry's change events and keeps them for the retention window. Because
every status change is an event here (heartbeat-made ones included), a client that applies the
delta to its copy ends with the same statuses as the registry, so the reconcile hash matches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from registry.model import ActionType, ChangeEvent, LeaseSnapshot


class DeltaJournal:
    def __init__(self, *, retention_ms: int) -> None:
        self.retention_ms = retention_ms
        self._events: deque[ChangeEvent] = deque()
        self.forgotten_index = 0  # the index of the newest change purged

    def record(self, event: ChangeEvent) -> None:
        """Registry listener: remember one change."""
        self._events.append(event)

    def purge(self, *, now_ms: int) -> int:
        """Forget changes older than the retention window; returns how many went."""
        horizon = now_ms - self.retention_ms
        purged = 0
        while self._events and self._events[0].at_ms < horizon:
            self.forgotten_index = self._events.popleft().index
            purged += 1
        return purged

    def recent(self, *, now_ms: int) -> list[tuple[str, list[LeaseSnapshot]]]:
        """The latest snapshot of every instance changed within the window, grouped by app.

        Applications and instances come in the order of their first change in the window.
        """
        self.purge(now_ms=now_ms)
        return _grouped(self._events)

    def forget_through(self, index: int) -> None:
        """Treat every change up to `index` as forgotten (those of a run before a restart)."""
        self.forgotten_index = max(self.forgotten_index, index)

    def after(self, index: int) -> list[ChangeEvent] | None:
        """The changes after registry index `index`, oldest first; None when some of them
        have been forgotten already, so only a full fetch can catch up."""
        if index < self.forgotten_index:
            return None
        newer: list[ChangeEvent] = []
        for event in reversed(self._events):  # from the newest: usually only a few to take
            if event.index <= index:
                break
            newer.append(event)
        newer.reverse()
        return newer

    def since(self, index: int) -> list[tuple[str, list[LeaseSnapshot]]] | None:
        """Like `recent`, for the changes after `index` only (None: forgotten, as `after`)."""
        events = self.after(index)
        return None if events is None else _grouped(events)

    def deleted(self, app: str) -> dict[str, int]:
        """Instance id -> when it was last removed, for the instances of `app` removed within
        the window (so anti-entropy does not bring back what was just cancelled here)."""
        return {
            event.lease.instance.instance_id: event.at_ms
            for event in self._events
            if event.action is ActionType.DELETED and event.lease.instance.app == app
        }

    def __len__(self) -> int:
        return len(self._events)


def _grouped(events: Iterable[ChangeEvent]) -> list[tuple[str, list[LeaseSnapshot]]]:
    """The latest snapshot of each instance in `events`, grouped by app in first-seen order."""
    latest: dict[tuple[str, str], LeaseSnapshot] = {}
    for event in events:
        instance = event.lease.instance
        latest[(instance.app, instance.instance_id)] = event.lease
    grouped: dict[str, list[LeaseSnapshot]] = {}
    for (app, _), snapshot in latest.items():
        grouped.setdefault(app, []).append(snapshot)
    return list(grouped.items())
