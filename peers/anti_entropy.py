"""Anti-entropy: peers compare per-application digests and repair differences by pulling.

Every `anti_entropy_interval`, and at once when a peer that could not be reached answers
again, this node asks each peer for its digests and fetches the applications whose digest
differs from ours, adopting what the peer holds newer (see `peers.merge`). Each side pulls, so
a lost batch converges within one interval, and a healed partition within seconds of the heal,
without waiting for heartbeats. Nothing is deleted here: instances only we hold
either reach the peer when it pulls from us, or expire where nobody renews them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

import structlog

from peers import merge
from peers.client import PeerClient, PeerError, PeerRefused, PeerSyncing
from peers.digest import Digests
from registry.clock import Clock
from registry.core import Registry
from registry.journal import DeltaJournal
from registry.lifecycle import Lifecycle
from registry.tasks import wait_set

log = structlog.get_logger()


TakeNotes = Callable[[object], None]  # a peer's override notes, as its digest answer lists them


async def reconcile(
    client: PeerClient,
    registry: Registry,
    journal: DeltaJournal,
    digests: Digests,
    clock: Clock,
    take_notes: TakeNotes,
) -> int:
    """One round with one peer; how many instances were adopted from it. The override notes
    its answer lists are taken afterwards (for the overrides adopted too)."""
    answer = await client.fetch_digest()
    theirs = answer.get("applications")
    if not isinstance(theirs, Mapping):
        raise PeerError(f"{client.url}: the digest answer has no applications")
    ours = digests.current()
    adopted = 0
    for app, digest in theirs.items():
        if not isinstance(app, str) or ours.get(app) == digest:
            continue
        document = await client.fetch_application(app)
        if document is not None:
            adopted += await merge.merge(
                registry,
                merge.applications(document),
                now_ms=clock.wall_ms(),
                deleted={app: journal.deleted(app)},
            )
    take_notes(answer.get("overrideNotes"))
    return adopted


async def anti_entropy_forever(
    peers: Callable[[], Sequence[PeerClient]],
    registry: Registry,
    journal: DeltaJournal,
    digests: Digests,
    clock: Clock,
    lifecycle: Lifecycle,
    take_notes: TakeNotes,
    *,
    interval: float,
    soon: asyncio.Event | None = None,
) -> None:
    """A round every `interval`, and at once when `soon` is set (a peer came back)."""
    soon = soon or asyncio.Event()
    while True:
        await wait_set(clock, soon, interval)
        soon.clear()
        for client in peers():
            try:
                adopted = await reconcile(client, registry, journal, digests, clock, take_notes)
            except PeerSyncing:
                continue
            except PeerRefused as exc:  # it answered, and would answer the same: say so
                log.warning("anti_entropy_refused", peer=client.url, detail=str(exc))
                continue
            except PeerError as exc:  # it is down or busy: its dispatcher reports that
                log.debug("anti_entropy_skipped", peer=client.url, detail=str(exc))
                continue
            except Exception:
                log.exception("anti_entropy_failed", peer=client.url)
                continue
            lifecycle.synced(f"anti-entropy reached {client.url}")
            if adopted:
                log.info("anti_entropy_repaired", peer=client.url, instances=adopted)
