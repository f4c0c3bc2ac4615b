"""How the registry tells the parts that follow it: one protocol, a method per kind of news.

A part subscribes once (`Registry.subscribe(part)`) and overrides the methods for the news it
wants; the registry calls only those, synchronously, in the order things happen, and never
awaits one (a heartbeat must not pay for a call that does nothing, or for a part that waits).
`registry/app.py` reads as the list of who listens.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Protocol

from registry.core.app_checks import AppCheck, AppChecks
from registry.core.model import ChangeEvent, InstanceStatus, Lease, ReplicationAction
from registry.core.overrides import OverrideChange

NEWS = (
    "on_change",
    "on_load",
    "on_override",
    "on_app_check",
    "on_hold",
    "on_first_renewal",
    "on_replicate",
)


class Loaded(Protocol):
    """What a part may read of the registry after a bulk load (the registry is one; named
    here so that this module, which the registry imports, need not import it back)."""

    app_checks: AppChecks

    def applications(self) -> Iterator[tuple[str, Collection[Lease]]]: ...

    def leases(self) -> Iterator[Lease]: ...

    def __len__(self) -> int: ...


class Subscriber:
    """A part the registry tells. Each method is one kind of news; the base ones do nothing."""

    def on_change(self, event: ChangeEvent) -> None:
        """An instance was added, modified or deleted: every change, in index order."""

    def on_load(self, registry: Loaded) -> None:
        """A bulk load (a warm restart) brought many instances with no event each: take the
        registry as it now is."""

    def on_override(self, change: OverrideChange) -> None:
        """An override or its note changed (set, deleted, expired, its instance cancelled)."""

    def on_app_check(self, app: str, check: AppCheck | None) -> None:
        """An admin's check on an application was set, replaced or removed (None), here or
        on a peer (core/app_checks.py)."""

    def on_hold(self, lease: Lease) -> None:
        """A check took hold of the instance, or let it go, and its status did not change
        (a change event tells the rest): for the store, which keeps the hold with it."""

    def on_first_renewal(self, lease: Lease) -> None:
        """A lease was renewed for the first time: the store keeps that it renews, for
        self-preservation after a restart."""

    def on_replicate(
        self,
        action: ReplicationAction,
        app: str,
        instance_id: str,
        status: InstanceStatus | None = None,
        last_dirty_ms: int | None = None,
        at_ms: int | None = None,
    ) -> None:
        """A command that came from a client or an admin here, not from a peer: for the
        peers. Heartbeats included (they change nothing anyone fetches, so no event carries
        them), and admin calls that changed nothing here (a peer may have missed them);
        `at_ms` is when an override was set or removed, which the peer weighs."""


def wanted(part: Subscriber) -> list[str]:
    """The kinds of news `part` overrides, so that it is told only those."""
    kind = type(part)
    return [name for name in NEWS if getattr(kind, name) is not getattr(Subscriber, name)]
