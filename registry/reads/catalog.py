"""Every application's instances, encoded: the blocks full, per-application and VIP documents
are made of.

Per application and format it keeps each instance's encoded parts (its item without the
`leaseInfo`, which only a change of the instance changes) and the application's block. A
change drops its application's block; the next read joins it again, encoding only instances
that changed (a new `InstanceInfo`) and writing every lease's few numbers afresh. Nothing is
encoded until a document that needs it is read.

Heartbeats are not changes, so a block's `lastRenewalTimestamp` values are as of its joining:
`refresh` joins again the blocks older than half of `max_age`, a share each second, so none is
older than that. That costs the lease numbers, not the instances' encoding.

A format a full document was read in within WARM_FOR is kept warm (`keep_warm`): the blocks
changes dropped are joined and compressed again within a second, off the read. During a deploy
changes touch most applications between two full fetches (at 100 000 instances in 500
applications and 20 changes a second, half of them in 15 s), and a read that joined and
compressed all of those took seconds on a busy node; it now finds all but the last second's.
The formats kept warm are remembered in the store, and a node restarted on it prepares them as
it starts serving (`expect_reads`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from functools import partial
from operator import attrgetter

from registry.codec import Format, Shape, shape
from registry.common.tasks import Pacer, Shared, in_passes
from registry.core.model import ActionType, ChangeEvent, InstanceInfo, Lease
from registry.core.registry import Registry
from registry.core.subscriber import Loaded, Subscriber
from registry.reads.encoded import Block, application_block, compress

VipKey = tuple[bool, str]  # (secure, VIP name)
WARM_FOR = 300.0  # seconds since a full document in a format was put together: kept warm
# An application's items were encoded anew; the VIP names its instances have.
Refreshed = Callable[[str, set[str]], None]
_APP_AND_ADDRESSES = attrgetter(
    "instance.app", "instance.vip_address", "instance.secure_vip_address"
)


# An instance's item before and after its leaseInfo. A pair of bytes, which the garbage
# collector stops tracking: a hundred thousand of them then cost full collections nothing.
Parts = tuple[bytes, bytes]


class _Encoded:
    """One application in one format."""

    __slots__ = ("block", "built_at", "encoded_from", "parts")

    def __init__(self) -> None:
        self.parts: dict[str, Parts] = {}  # instance id -> parts, in the registry's order
        self.encoded_from: dict[str, InstanceInfo] = {}  # instance id -> what its parts show
        self.block: Block | None = None  # dropped by a change, joined again on the next read
        self.built_at = 0.0  # monotonic seconds when the block was joined


class Catalog(Subscriber):
    def __init__(self, registry: Registry, *, max_age: float | None = None) -> None:
        self._registry = registry
        self._max_age = max_age
        self._encoded: dict[Format, dict[str, _Encoded]] = {fmt: {} for fmt in Format}
        self._vips: dict[VipKey, Counter[str]] = {}  # which applications have a VIP, how often
        self.encoded = 0  # instances encoded so far: what changes cost, counted
        self._preparing = Shared()
        self._read_at: dict[Format, float] = {}  # when a full document in each was last made

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: the changed instance's application needs its blocks joined
        again; the VIP index follows the instance."""
        instance = event.lease.instance
        app = instance.app
        for by_app in self._encoded.values():
            encoded = by_app.get(app)
            if encoded is not None:
                encoded.block = None
        if event.previous is not None:
            self._count_vips(event.previous, -1)
        if event.action is not ActionType.DELETED:
            self._count_vips(instance, +1)
        elif not self._registry.application(app):
            for by_app in self._encoded.values():
                by_app.pop(app, None)

    def on_load(self, registry: Loaded) -> None:
        """Registry hook after a bulk load: index the VIPs of everything it now holds."""
        for fmt in Format:
            self._encoded[fmt].clear()
        self._vips.clear()
        # Counted by distinct (app, VIP addresses) first: an application's instances mostly
        # share theirs, so a warm restart of 100 000 counts a few hundred.
        addresses = Counter(map(_APP_AND_ADDRESSES, registry.leases()))
        for (app, vip, secure_vip), count in addresses.items():
            for key in _address_keys(vip, secure_vip):
                self._vips.setdefault(key, Counter())[app] += count

    # Reads ---------------------------------------------------------------------------------

    def block(self, app: str, fmt: Format, *, now: float) -> Block:
        """The application's block; in JSON it starts with the separator that goes before
        every application of a list but the first (`Block.rest` is without it)."""
        by_app = self._encoded[fmt]
        encoded = by_app.get(app)
        if encoded is None:
            encoded = by_app[app] = _Encoded()
        if encoded.block is None:
            items = self._items(encoded, fmt, self._registry.application(app))
            encoded.block = application_block(fmt, app, items)
            encoded.built_at = now
        return encoded.block

    def current_block(self, app: str, fmt: Format) -> Block:
        """The application's block with every lease's numbers as they are now, not kept: for
        a peer copying leases, which must not take renewals up to `max_age` old for the last
        (a lease shorter than that would look expired). Instances are not encoded again."""
        return application_block(fmt, app, self.items(app, fmt, self._registry.application(app)))

    def items(self, app: str, fmt: Format, leases: Iterable[Lease]) -> list[bytes]:
        """The encoded items of some of an application's `leases`."""
        encoded = self._encoded[fmt].get(app)
        if encoded is None:
            encoded = self._encoded[fmt][app] = _Encoded()
        return self._items(encoded, fmt, leases, keep_others=True)

    async def prepare(self, fmt: Format, *, now: float, pacer: Pacer) -> None:
        """Join every application's block that a change dropped, giving the loop a turn as
        `pacer` says, so that a full document put together next costs the loop only what
        changed meanwhile (the first one after a start or a storm would encode everything).
        Readers asking at the same time share one run."""
        self._read_at[fmt] = now
        await self._preparing.run(fmt, lambda: self._prepare(fmt, now=now, pacer=pacer))

    def read_formats(self, *, now: float) -> list[Format]:
        """The formats kept warm as of `now`: a store remembers them for a restart."""
        return [fmt for fmt, at in self._read_at.items() if now - at <= WARM_FOR]

    def expect_reads(self, formats: Iterable[Format], *, now: float) -> None:
        """Keep `formats` warm from now on, as if read now: a node restarted on its store
        prepares what its clients read before the restart, rather than on their first read
        (which clients failing over to it make at once)."""
        for fmt in formats:
            self._read_at[fmt] = now

    async def keep_warm(self, *, now: float, pacer: Pacer) -> int:
        """Join and compress the blocks that changes (or `refresh`) left to do, in each format
        a full document was put together in within WARM_FOR; how many blocks were compressed."""
        compressed = 0
        for fmt, read_at in list(self._read_at.items()):
            if now - read_at > WARM_FOR:
                del self._read_at[fmt]
                continue
            await self._preparing.run(fmt, partial(self._prepare, fmt, now=now, pacer=pacer))
            by_app = self._encoded[fmt]
            first = next(iter(self._registry.application_names()), None)
            blocks = [
                # A JSON list's first application goes without its separator
                e.block.rest() if app == first and fmt.is_json else e.block
                for app, e in by_app.items()
                if e.block is not None
            ]
            cold = [block for block in blocks if block.segment is None]
            await compress(cold)
            compressed += len(cold)
        return compressed

    async def _prepare(self, fmt: Format, *, now: float, pacer: Pacer) -> None:
        by_app = self._encoded[fmt]

        def missing() -> list[str]:
            return [
                app
                for app in self._registry.application_names()
                if (encoded := by_app.get(app)) is None or encoded.block is None
            ]

        async def join(app: str) -> None:
            if self._registry.application(app):  # not gone while the loop had its turn
                await self.encode(app, fmt, pacer)
                self.block(app, fmt, now=now)
                await pacer.pace()

        await in_passes(missing, join)

    async def encode(self, app: str, fmt: Format, pacer: Pacer) -> None:
        """Encode the application's new instances ahead of joining its block, giving the loop
        turns in between: one application can hold thousands."""
        by_app = self._encoded[fmt]
        codec = shape(fmt)
        for lease in list(self._registry.application(app)):
            encoded = by_app.get(app)
            if encoded is None:
                encoded = by_app[app] = _Encoded()
            self._parts(encoded, codec, lease.instance)
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

    async def refresh(
        self, *, now: float, refreshed: Refreshed, pacer: Pacer, every: float = 1.0
    ) -> int:
        """Join again, oldest first, blocks older than half of `max_age`: each call (made
        `every` seconds) takes its share, so that all such blocks are done within the other
        half. Tells `refreshed` of each application, so the documents made of its old block
        go. Returns how many blocks.

        A share rather than all at once: a storm builds every block within seconds, on every
        node of a cluster, and all of them would then come due together, every `max_age`:
        joining and compressing them all made every node's reads wait a few hundred
        milliseconds at the same moments. Taken a share at a time, they come due spread out."""
        if self._max_age is None:
            return 0
        half = self._max_age / 2
        horizon = now - half
        aged = sorted(
            (encoded.built_at, n, fmt, app)
            for n, (fmt, by_app) in enumerate(self._encoded.items())
            if not fmt.compact  # no lease numbers: never stale by age
            for app, encoded in by_app.items()
            if encoded.block is not None and encoded.built_at < horizon
        )
        blocks = sum(
            e.block is not None
            for fmt, by_app in self._encoded.items()
            if not fmt.compact
            for e in by_app.values()
        )
        share = math.ceil(blocks * every / half)
        count = 0
        for _, _, fmt, app in aged[:share]:
            encoded = self._encoded[fmt].get(app)
            if encoded is None or encoded.block is None or encoded.built_at >= horizon:
                continue  # gone, dropped, or joined anew while this one waited its turn
            encoded.block = None
            self.block(app, fmt, now=now)
            refreshed(app, self._vips_of(app))
            count += 1
            await pacer.pace()
        return count

    # Internals -----------------------------------------------------------------------------

    def _items(
        self, encoded: _Encoded, fmt: Format, leases: Iterable[Lease], keep_others: bool = False
    ) -> list[bytes]:
        """Each lease's item: its instance's parts (encoded again only when the instance
        changed) around its lease's numbers as they are now. The parts of `leases` are kept;
        those of other instances too with `keep_others`, or else let go (they left)."""
        codec = shape(fmt)
        if keep_others:
            parts, encoded_from = encoded.parts, encoded.encoded_from
        else:
            parts, encoded_from = {}, {}
        lease_part = codec.lease_part
        items = []
        for lease in leases:
            instance = lease.instance
            head, tail = self._parts(encoded, codec, instance)
            iid = instance.instance_id
            parts[iid] = head, tail
            encoded_from[iid] = instance
            items.append(head + lease_part(lease) + tail)
        encoded.parts, encoded.encoded_from = parts, encoded_from
        return items

    def _parts(self, encoded: _Encoded, codec: Shape, instance: InstanceInfo) -> Parts:
        """The instance's parts: those kept, or encoded now (and kept) if it changed."""
        iid = instance.instance_id
        if encoded.encoded_from.get(iid) is instance:
            return encoded.parts[iid]
        kept = encoded.parts[iid] = codec.instance_parts(instance)
        encoded.encoded_from[iid] = instance
        self.encoded += 1
        return kept

    def _count_vips(self, instance: InstanceInfo, step: int) -> None:
        for key in _vip_keys(instance):
            apps = self._vips.get(key)
            if apps is None:  # not setdefault: it would make a Counter on every call
                apps = self._vips[key] = Counter()
            apps[instance.app] += step
            if apps[instance.app] <= 0:
                del apps[instance.app]
                if not apps:
                    del self._vips[key]

    def _vips_of(self, app: str) -> set[str]:
        leases = self._registry.application(app)
        return {name for lease in leases for _, name in _vip_keys(lease.instance)}


def _vip_keys(instance: InstanceInfo) -> Iterable[VipKey]:
    return _address_keys(instance.vip_address, instance.secure_vip_address)


def _address_keys(vip: str | None, secure_vip: str | None) -> Iterable[VipKey]:
    for secure, address in ((False, vip), (True, secure_vip)):
        if address:
            for name in address.split(","):
                yield secure, name
