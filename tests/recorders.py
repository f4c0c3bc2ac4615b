"""Subscribers that remember what the registry told them, for tests to look at."""

from __future__ import annotations

from registry.core.model import ChangeEvent
from registry.core.overrides import OverrideChange
from registry.core.subscriber import Subscriber


class Changes(list[ChangeEvent], Subscriber):
    """Every change event, in order."""

    def on_change(self, event: ChangeEvent) -> None:
        self.append(event)


class OverrideChanges(list[OverrideChange], Subscriber):
    """Every override change, in order."""

    def on_override(self, change: OverrideChange) -> None:
        self.append(change)
