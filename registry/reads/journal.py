"""The delta journal: what changed recently, for `GET apps/delta` (contract 9).

It subscribes to the registry's change events and keeps them for the retention window. Because
every status change is an event here (heartbeat-made ones included), a client that applies the
delta to its copy ends with the same statuses as the registry, so the reconcile hash matches.

A delta lists the latest snapshot of every instance changed within the window, grouped by
application; applications and instances come in the order of their first change in the
window. During a deploy that is most of the registry, and it changes with every registration,
so the grouping is kept as changes come and go rather than made again for each read: each
change is encoded once (`Entry`), and each application's part of the delta is a block joined
from its entries, joined again only when one of its instances changes or leaves the window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from operator import attrgetter

from registry.codec import Format, shape
from registry.common.tasks import SLICE, Pacer, Shared, in_passes
from registry.core.model import ActionType, ChangeEvent
from registry.core.subscriber import Subscriber
from registry.reads.encoded import Block, application_block


class Entry:
    """One change as the journal keeps it: what the event said (not the event itself, which
    also holds the instance as it was before), its instance encoded once per format when first
    asked, and where its instance stands in the window: the index of the next change of the
    same instance, and (kept up to date on the latest entry of an instance only) the index of
    the instance's first change in the window, which orders the delta."""

    __slots__ = (
        "_compact",
        "_json",
        "_xml",
        "at_ms",
        "first",
        "index",
        "lease",
        "left_vips",
        "next_index",
    )

    def __init__(self, event: ChangeEvent) -> None:
        self.lease = event.lease
        self.index = event.index
        # The VIP addresses the instance had before, when the change took it off some: a
        # stream watching one of them must hear of it (registry/reads/interest.py).
        self.left_vips: tuple[str | None, str | None] | None = _left_vips(event)
        self.at_ms = event.at_ms
        self.first = event.index
        self.next_index = 0  # 0: none yet
        self._json: bytes | None = None
        self._xml: bytes | None = None
        self._compact: dict[Format, bytes] | None = None

    @property
    def action(self) -> ActionType:
        # Not kept apart: the instance's actionType says it (8 B an entry).
        action = self.lease.instance.action_type
        assert action is not None, "every change sets the instance's actionType"
        return action

    def item(self, fmt: Format) -> bytes:
        """The instance as an item of an application's instance list."""
        if fmt is Format.JSON:
            if self._json is None:
                self._json = shape(fmt).instance_item(self.lease)
            return self._json
        if fmt is Format.XML:
            if self._xml is None:
                self._xml = shape(fmt).instance_item(self.lease)
            return self._xml
        if self._compact is None:  # the compact forms: asked for by few clients
            self._compact = {}
        item = self._compact.get(fmt)
        if item is None:
            item = self._compact[fmt] = shape(fmt).instance_item(self.lease)
        return item


def _left_vips(event: ChangeEvent) -> tuple[str | None, str | None] | None:
    before, after = event.previous, event.lease.instance
    if before is None or (
        before.vip_address == after.vip_address
        and before.secure_vip_address == after.secure_vip_address
    ):
        return None
    return before.vip_address, before.secure_vip_address


_by_first = attrgetter("first")


class _Changed:
    """An application's instances changed within the window, and its part of the delta."""

    __slots__ = ("blocks", "first", "members")

    def __init__(self) -> None:
        self.members: dict[str, Entry] = {}  # instance id -> its latest entry
        self.first = 0  # the index of the application's first change in the window; 0: stale
        self.blocks: dict[Format, Block] = {}

    def touched(self) -> None:
        self.first = 0
        self.blocks.clear()

    def first_index(self) -> int:
        if not self.first:
            self.first = min(entry.first for entry in self.members.values())
        return self.first

    def block(self, app: str, fmt: Format) -> Block:
        block = self.blocks.get(fmt)
        if block is None:
            items = [entry.item(fmt) for entry in sorted(self.members.values(), key=_by_first)]
            block = self.blocks[fmt] = application_block(fmt, app, items)
        return block


class DeltaJournal(Subscriber):
    def __init__(self, *, retention_ms: int) -> None:
        self.retention_ms = retention_ms
        self._entries: deque[Entry] = deque()
        self._changed: dict[str, _Changed] = {}  # by application
        self.forgotten_index = 0  # the index of the newest change purged
        self._preparing = Shared()

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: remember one change. (A bulk load needs no word here: what it
        brings back is no change to list.)"""
        entry = Entry(event)
        self._entries.append(entry)
        instance = event.lease.instance
        changed = self._changed.get(instance.app)
        if changed is None:
            changed = self._changed[instance.app] = _Changed()
        latest = changed.members.get(instance.instance_id)
        if latest is not None:
            latest.next_index = event.index
            entry.first = latest.first
        changed.members[instance.instance_id] = entry
        changed.touched()

    def purge(self, *, now_ms: int, limit: int | None = None) -> int:
        """Forget changes older than the retention window (at most `limit` of them); returns
        how many went."""
        horizon = now_ms - self.retention_ms
        entries = self._entries
        purged = 0
        while entries and entries[0].at_ms < horizon and purged != limit:
            entry = entries.popleft()
            self.forgotten_index = entry.index
            self._forget(entry)
            purged += 1
        return purged

    async def expire(self, *, now_ms: int, pacer: Pacer) -> int:
        """`purge`, a slice at a time: three minutes after a registration storm, a hundred
        thousand changes leave the window at once. Returns how many went."""
        purged = 0
        while count := self.purge(now_ms=now_ms, limit=SLICE):
            purged += count
            await pacer.pace()
        return purged

    def _forget(self, entry: Entry) -> None:
        # The oldest change in the window is its instance's first there.
        instance = entry.lease.instance
        changed = self._changed[instance.app]
        if entry.next_index:
            changed.members[instance.instance_id].first = entry.next_index
        else:
            del changed.members[instance.instance_id]
            if not changed.members:
                del self._changed[instance.app]
                return
        changed.touched()

    def delta_blocks(self, fmt: Format, *, now_ms: int) -> list[Block]:
        """The delta's application blocks, in order, after forgetting what is too old; in
        JSON each starts with the separator (see `Catalog.block`)."""
        self.purge(now_ms=now_ms)
        apps = sorted(self._changed.items(), key=lambda item: item[1].first_index())
        return [changed.block(app, fmt) for app, changed in apps]

    async def prepare(self, fmt: Format, *, now_ms: int, pacer: Pacer) -> None:
        """Join the delta's blocks that changes dropped, giving the loop a turn as `pacer`
        says; readers asking at the same time share one run (see `Catalog.prepare`)."""
        await self._preparing.run(fmt, lambda: self._prepare(fmt, now_ms=now_ms, pacer=pacer))

    async def _prepare(self, fmt: Format, *, now_ms: int, pacer: Pacer) -> None:
        self.purge(now_ms=now_ms)

        def missing() -> list[str]:
            return [app for app, changed in self._changed.items() if fmt not in changed.blocks]

        async def join(app: str) -> None:
            changed = self._changed.get(app)
            if changed is not None and fmt not in changed.blocks:
                for entry in list(changed.members.values()):  # thousands, in a deploy
                    entry.item(fmt)
                    await pacer.pace()
                changed.block(app, fmt)
                changed.first_index()  # the order the delta sorts by, made here in slices too
                await pacer.pace()

        await in_passes(missing, join)

    def forget_through(self, index: int) -> None:
        """Treat every change up to `index` as forgotten (those of a run before a restart)."""
        self.forgotten_index = max(self.forgotten_index, index)

    def after(self, index: int) -> list[Entry] | None:
        """The changes after registry index `index`, oldest first; None when some of them
        have been forgotten already, so only a full fetch can catch up."""
        if index < self.forgotten_index:
            return None
        newer: list[Entry] = []
        for entry in reversed(self._entries):  # from the newest: usually only a few to take
            if entry.index <= index:
                break
            newer.append(entry)
        newer.reverse()
        return newer

    def since(self, index: int) -> list[tuple[str, list[Entry]]] | None:
        """The latest entry of every instance changed after `index`, grouped as a delta
        groups them (None: forgotten, as `after`)."""
        entries = self.after(index)
        return None if entries is None else grouped(entries)

    def __len__(self) -> int:
        return len(self._entries)


def grouped(entries: Iterable[Entry]) -> list[tuple[str, list[Entry]]]:
    """The latest entry of each instance in `entries`, grouped by application; applications
    and instances in the order of their first change."""
    latest: dict[tuple[str, str], Entry] = {}
    for entry in entries:
        instance = entry.lease.instance
        latest[(instance.app, instance.instance_id)] = entry
    by_app: dict[str, list[Entry]] = {}
    for (app, _), entry in latest.items():
        by_app.setdefault(app, []).append(entry)
    return list(by_app.items())
