"""Every application's instances, encoded: the blocks full, per-application and VIP documents
are made of.

Per application and format it keeps each instance's encoded item, in the registry's order,
and the application's block joined from them. A change marks only its own instance stale, so
the next read encodes that one instance again and joins the block anew; the other items and
every other application's block are reused as they are. Nothing is encoded until a document
that needs it is read.

Heartbeats are not changes, so an item's `lastRenewalTimestamp` is as of the item's encoding:
`refresh` encodes again the applications whose items are older than `max_age`, a few at a
time, so no item is older than that (plus one refresh interval).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from registry.codec import Format, shape
from registry.core import Registry
from registry.encoded import Block
from registry.model import ActionType, ChangeEvent, InstanceInfo
from registry.tasks import Pacer

VipKey = tuple[bool, str]  # (secure, VIP name)
# An application's items were encoded anew; the VIP names its instances have.
Refreshed = Callable[[str, set[str]], None]


class _Encoded:
    """One application's items in one format."""

    __slots__ = ("block", "built_at", "items", "stale")

    def __init__(self) -> None:
        self.items: dict[str, bytes] = {}  # instance id -> item, in the registry's order
        self.stale: set[str] | None = None  # ids changed since the items were made; None: all
        self.block: Block | None = None  # dropped by a change, joined again on the next read
        self.built_at = 0.0  # monotonic seconds when every item was last encoded


class Catalog:
    def __init__(self, registry: Registry, *, max_age: float | None = None) -> None:
        self._registry = registry
        self._max_age = max_age
        self._encoded: dict[Format, dict[str, _Encoded]] = {fmt: {} for fmt in Format}
        self._vips: dict[VipKey, Counter[str]] = {}  # which applications have a VIP, how often
        self.encoded = 0  # instances encoded so far: what changes cost, counted

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: the changed instance's items, and its application's blocks, are
        stale; the VIP index follows the instance."""
        instance = event.lease.instance
        app, iid = instance.app, instance.instance_id
        for by_app in self._encoded.values():
            encoded = by_app.get(app)
            if encoded is not None:
                encoded.block = None
                if encoded.stale is not None:
                    encoded.stale.add(iid)
        if event.previous is not None:
            self._count_vips(event.previous, -1)
        if event.action is not ActionType.DELETED:
            self._count_vips(instance, +1)
        elif not self._registry.application(app):
            for by_app in self._encoded.values():
                by_app.pop(app, None)

    def loaded(self, registry: Registry) -> None:
        """Registry hook after a bulk load: index the VIPs of everything it now holds."""
        for fmt in Format:
            self._encoded[fmt].clear()
        self._vips.clear()
        for lease in registry.leases():
            self._count_vips(lease.instance, +1)

    # Reads ---------------------------------------------------------------------------------

    def block(self, app: str, fmt: Format, *, now: float) -> Block:
        """The application's block; in JSON it starts with the separator that goes before
        every application of a list but the first (`Block.rest` is without it)."""
        encoded = self._items(app, fmt, now)
        if encoded.block is None:
            codec = shape(fmt)
            encoded.block = Block(
                codec.SEPARATOR + codec.application_block(app, encoded.items.values())
            )
        return encoded.block

    def items(self, app: str, fmt: Format, *, now: float) -> dict[str, bytes]:
        """Instance id -> encoded item, for the application's instances in order."""
        return self._items(app, fmt, now).items

    async def prepare(self, fmt: Format, *, now: float, pacer: Pacer) -> None:
        """Join every application's block that a change dropped, giving the loop a turn as
        `pacer` says, so that a full document put together next costs the loop only what
        changed meanwhile (the first one after a start or a storm would encode everything)."""
        by_app = self._encoded[fmt]
        for app in list(self._registry.application_names()):
            encoded = by_app.get(app)
            if encoded is None or encoded.block is None:
                self.block(app, fmt, now=now)
                await pacer.pace()

    def vip_applications(self, vip: str, *, secure: bool) -> list[str]:
        """The applications with an instance that names `vip`, in the registry's order."""
        apps = self._vips.get((secure, vip))
        if not apps:
            return []
        if len(apps) == 1:
            return list(apps)
        return [name for name in self._registry.application_names() if name in apps]

    # Keeping items fresh -------------------------------------------------------------------

    async def refresh(self, *, now: float, refreshed: Refreshed, pacer: Pacer) -> int:
        """Encode again every application whose items are older than `max_age`; tell
        `refreshed` of each, so the documents made of its old items go. Returns how many."""
        if self._max_age is None:
            return 0
        horizon = now - self._max_age
        count = 0
        for fmt, by_app in self._encoded.items():
            for app in [app for app, encoded in by_app.items() if encoded.built_at < horizon]:
                encoded = by_app.get(app)
                if encoded is None or encoded.built_at >= horizon:
                    continue  # gone, or made anew by a read while this one waited its turn
                encoded.stale = None
                self._items(app, fmt, now)
                refreshed(app, self._vips_of(app))
                count += 1
                await pacer.pace()
        return count

    # Internals -----------------------------------------------------------------------------

    def _items(self, app: str, fmt: Format, now: float) -> _Encoded:
        by_app = self._encoded[fmt]
        encoded = by_app.get(app)
        if encoded is None:
            encoded = by_app[app] = _Encoded()
        elif encoded.stale is not None and not encoded.stale and encoded.items:
            return encoded  # nothing changed since the items were made
        stale, old = encoded.stale, encoded.items
        item = shape(fmt).instance_item
        items: dict[str, bytes] = {}
        for lease in self._registry.application(app):
            iid = lease.instance.instance_id
            data = old.get(iid) if stale is not None and iid not in stale else None
            if data is None:
                data = item(lease)
                self.encoded += 1
            items[iid] = data
        if stale is None:
            encoded.built_at = now
        encoded.items, encoded.stale, encoded.block = items, set(), None
        return encoded

    def _count_vips(self, instance: InstanceInfo, step: int) -> None:
        for key in _vip_keys(instance):
            apps = self._vips.setdefault(key, Counter())
            apps[instance.app] += step
            if apps[instance.app] <= 0:
                del apps[instance.app]
                if not apps:
                    del self._vips[key]

    def _vips_of(self, app: str) -> set[str]:
        leases = self._registry.application(app)
        return {name for lease in leases for _, name in _vip_keys(lease.instance)}


def _vip_keys(instance: InstanceInfo) -> Iterable[VipKey]:
    for secure, address in ((False, instance.vip_address), (True, instance.secure_vip_address)):
        if address:
            for name in address.split(","):
                yield secure, name
