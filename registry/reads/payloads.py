"""The fetch documents, put together from encoded pieces in one synchronous step.

Because nothing can change the registry while one of these runs, every document and its
`apps__hashcode` describe the same state. A document is a list of blocks kept elsewhere: the
applications' blocks (the catalog), the delta's (the journal), or items joined for a small
document (an application's instances, a VIP's, a long-poll's changes). Putting one together
costs what changed since the last time, not what the registry holds. The response cache keeps
what these return.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from registry.codec import Format, shape
from registry.common.hashcode import hash_of_counts, reconcile_hash
from registry.common.tasks import Pacer
from registry.core.model import InstanceInfo, InstanceStatus
from registry.core.registry import Registry
from registry.core.zones import zone_of
from registry.reads.catalog import Catalog
from registry.reads.encoded import Block, Document, application_block
from registry.reads.journal import DeltaJournal, Entry
from registry.reads.zoned import ZonedBlocks

# A full fetch always says "1": clients treat "-1" as "never fetch deltas" (contract 9.3).
FULL_FETCH_VERSION = "1"
VIP_VERSION = "-1"
_TAILS = {fmt: Block(shape(fmt).APPLICATIONS_TAIL) for fmt in Format}  # compressed once


def full_registry(registry: Registry, catalog: Catalog, fmt: Format, *, now: float) -> Document:
    """Every application with all its instances, expired-but-not-evicted included."""
    blocks = [catalog.block(name, fmt, now=now) for name, _ in registry.applications()]
    return _applications(registry, fmt, blocks, FULL_FETCH_VERSION)


async def current_registry(
    registry: Registry, catalog: Catalog, fmt: Format, *, pacer: Pacer
) -> Document:
    """`full_registry` for a peer's copy (start-up sync), every lease's numbers as they are
    now: each application's block joined afresh, never kept. The one document not made in one
    step: instances not encoded yet are encoded a few at a time and applications joined one
    after another, giving the loop turns as `pacer` says; each application is as it is when
    joined (what changes meanwhile reaches the peer by replication)."""
    blocks = []
    for name in [name for name, _ in registry.applications()]:
        await catalog.encode(name, fmt, pacer)
        if registry.application(name):  # not gone while the loop had its turn
            blocks.append(catalog.current_block(name, fmt))
        await pacer.pace()
    return _applications(registry, fmt, blocks, FULL_FETCH_VERSION)


async def current_application(
    registry: Registry, catalog: Catalog, name: str, fmt: Format, *, pacer: Pacer
) -> Document:
    """`application` for a peer (anti-entropy): every lease's numbers as they are now."""
    await catalog.encode(name, fmt, pacer)
    return _application(registry, fmt, catalog.current_block(name, fmt))


def delta(registry: Registry, journal: DeltaJournal, fmt: Format, *, now_ms: int) -> Document:
    """Recent changes, versioned by the registry index, hashed over the whole registry."""
    blocks = journal.delta_blocks(fmt, now_ms=now_ms)
    return _applications(registry, fmt, blocks, str(registry.index))


def changes(registry: Registry, changed: list[tuple[str, list[Entry]]], fmt: Format) -> Document:
    """A delta of the changes a long-poll asked for, versioned and hashed like `delta`."""
    blocks = [
        application_block(fmt, app, [e.item(fmt) for e in entries]) for app, entries in changed
    ]
    return _applications(registry, fmt, blocks, str(registry.index))


def application(
    registry: Registry, catalog: Catalog, name: str, fmt: Format, *, now: float
) -> Document:
    return _application(registry, fmt, catalog.block(name, fmt, now=now))


def _application(registry: Registry, fmt: Format, block: Block) -> Document:
    codec = shape(fmt)
    if fmt.is_json:
        block = block.rest()
    blocks = [Block(codec.APPLICATION_HEAD), block, Block(codec.APPLICATION_TAIL)]
    return Document([b for b in blocks if len(b)], registry.index)


def vip(
    registry: Registry,
    catalog: Catalog,
    address: str,
    fmt: Format,
    *,
    secure: bool,
    zone: str | None = None,
) -> Document | None:
    """The instances whose comma-separated (secure) VIP address names `address` (and in
    `zone`, when given), by application, hashed over its own content; None when no instance
    has it."""

    def wanted(instance: InstanceInfo) -> bool:
        vips = instance.secure_vip_address if secure else instance.vip_address
        if not vips or address not in vips.split(","):
            return False
        return zone is None or zone_of(instance) == zone

    names = catalog.vip_applications(address, secure=secure)
    return _chosen(registry, catalog, fmt, names, wanted, VIP_VERSION)


def zoned_registry(
    registry: Registry, zoned: ZonedBlocks, fmt: Format, zone: str, *, now: float
) -> Document | None:
    """`full_registry` of the instances in `zone` alone (core/zones.py), hashed over its own
    content, from blocks kept per application (reads/zoned.py); None when no instance is in
    it (a zone a client made up is never kept)."""
    if not zoned.has(zone):
        return None
    blocks: list[Block] = []
    counts: Counter[InstanceStatus] = Counter()
    for name, _ in registry.applications():
        made = zoned.block(name, zone, fmt, now=now)
        if made is not None:
            blocks.append(made[0])
            counts.update(made[1])
    if not blocks:
        return None
    head = shape(fmt).applications_head(version=FULL_FETCH_VERSION, hashcode=hash_of_counts(counts))
    return _document(registry, fmt, head, blocks)


def zoned_application(
    registry: Registry, catalog: Catalog, name: str, fmt: Format, zone: str
) -> Document | None:
    """`application` with its instances in `zone` alone; None when none is in it."""
    chosen = [lease for lease in registry.application(name) if zone_of(lease.instance) == zone]
    if not chosen:
        return None
    return _application(
        registry, fmt, application_block(fmt, name, catalog.items(name, fmt, chosen))
    )


def no_instances(registry: Registry, name: str, fmt: Format) -> Document:
    """The application with none of its instances: what a zone none of them is in shows."""
    return _application(registry, fmt, application_block(fmt, name, []))


def _chosen(
    registry: Registry,
    catalog: Catalog,
    fmt: Format,
    names: Iterable[str],
    wanted: Callable[[InstanceInfo], bool],
    version: str,
) -> Document | None:
    """The instances `wanted` picks from the applications `names`, by application, hashed
    over their own statuses (a filtered copy's hashcode); None when it picks none."""
    blocks: list[Block] = []
    statuses: list[InstanceStatus] = []
    for name in names:
        chosen = [lease for lease in registry.application(name) if wanted(lease.instance)]
        if chosen:
            statuses.extend(lease.instance.status for lease in chosen)
            blocks.append(application_block(fmt, name, catalog.items(name, fmt, chosen)))
    if not blocks:
        return None
    head = shape(fmt).applications_head(version=version, hashcode=reconcile_hash(statuses))
    return _document(registry, fmt, head, blocks)


def no_vip(registry: Registry, fmt: Format, version: str = VIP_VERSION) -> Document:
    """The answer for a VIP (or a zone) no instance has: no applications."""
    head = shape(fmt).applications_head(version=version, hashcode="")
    return _document(registry, fmt, head, [])


def _applications(registry: Registry, fmt: Format, blocks: list[Block], version: str) -> Document:
    head = shape(fmt).applications_head(version=version, hashcode=registry.reconcile_hash())
    return _document(registry, fmt, head, blocks)


def _document(registry: Registry, fmt: Format, head: bytes, blocks: Iterable[Block]) -> Document:
    parts = list(blocks)
    if parts and fmt.is_json:
        parts[0] = parts[0].rest()  # no separator before the first application
    return Document([Block(head), *parts, _TAILS[fmt]], registry.index)
