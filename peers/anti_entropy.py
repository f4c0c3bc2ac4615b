"""Anti-entropy: peers compare per-application digests and repair differences by pulling.

Every `anti_entropy_interval`, at once when a peer that could not be reached answers again,
and at once after a restart from the store, this node asks each peer for its digests and, for
the applications whose digest differs from ours, fetches the peer's instances and the removals
it remembers, taking what wins by the rule of registry/tombstones.py (see `peers.merge`). The
digest answer also lists the peer's overrides and override removals, of which the later ones
are taken. Each side pulls, so a lost batch converges within one interval, and a healed
partition or a restarted node within seconds, without waiting for heartbeats. Instances only
we hold either reach the peer when it pulls from us, or expire where nobody renews them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

import structlog

from peers import merge
from peers.client import PeerClient, PeerError, PeerRefused, PeerSyncing, PeerUnavailable
from peers.digest import Digests
from registry.clock import Clock
from registry.core import Registry
from registry.lifecycle import Lifecycle
from registry.tasks import Pacer, wait_set

log = structlog.get_logger()


async def reconcile(
    client: PeerClient, registry: Registry, digests: Digests, clock: Clock
) -> tuple[int, int]:
    """One round with one peer: how many instances changed here (and overrides taken), and
    in how many applications the digests differed."""
    answer = await client.fetch_digest()
    theirs = answer.get("applications")
    if not isinstance(theirs, Mapping):
        raise PeerError(f"{client.url}: the digest answer has no applications")
    ours = await digests.current(Pacer())
    changed = differed = 0
    for app, digest in theirs.items():
        if not isinstance(app, str) or ours.get(app) == digest:
            continue
        differed += 1
        document = await client.fetch_application(app)
        removed = merge.removals(await client.fetch_removed(app))
        changed += await merge.merge(
            registry,
            merge.applications(document) if document is not None else [],
            now_ms=clock.wall_ms(),
            removed=removed,
        )
    return changed + merge.take_overrides(registry, answer, now_ms=clock.wall_ms()), differed


async def anti_entropy_forever(
    peers: Callable[[], Sequence[PeerClient]],
    registry: Registry,
    digests: Digests,
    clock: Clock,
    lifecycle: Lifecycle,
    *,
    interval: float,
    retry: float | None = None,
    soon: asyncio.Event | None = None,
) -> None:
    """A round every `interval`, at once when `soon` is set (a peer came back), and after
    `retry` when the last round could not reach a peer or found the peers differing: a node
    cut off with nothing to send its peers still pulls what they hold within seconds of the
    heal, and what the peers' queued changes bring after a round (each side applying them in
    its own order) is settled within seconds too, not a whole interval later."""
    soon = soon or asyncio.Event()
    again = False  # the next round soon
    while True:
        await wait_set(clock, soon, retry if again and retry is not None else interval)
        soon.clear()
        again = False
        for client in peers():
            try:
                changed, differed = await reconcile(client, registry, digests, clock)
            except PeerSyncing:
                continue
            except PeerRefused as exc:  # it answered, and would answer the same: say so
                log.warning("anti_entropy_refused", peer=client.url, detail=str(exc))
                continue
            except PeerError as exc:  # it is down or busy: its dispatcher reports that
                log.debug("anti_entropy_skipped", peer=client.url, detail=str(exc))
                # Unreachable (not merely busy): try again soon, to catch its return.
                again |= isinstance(exc, PeerUnavailable) and not exc.congested
                continue
            except Exception:
                log.exception("anti_entropy_failed", peer=client.url)
                continue
            lifecycle.synced(f"anti-entropy reached {client.url}")
            again |= differed > 0
            if changed:
                log.info("anti_entropy_repaired", peer=client.url, changed=changed)
