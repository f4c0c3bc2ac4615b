"""Anti-entropy: peers compare per-application digests and repair differences by pulling.

Every `peers.anti_entropy_interval`, at once when a peer that could not be reached answers again,
and at once after a restart from the store, this node asks each peer for its digests and, for
the applications whose digest differs from ours, fetches the peer's instances and the removals
it remembers, taking what wins by the rule of registry/core/tombstones.py (see `peers.merge`). The
digest answer also lists the peer's overrides and override removals, of which the later ones
are taken. Each side pulls, so a lost batch converges within one interval, and a healed
partition or a restarted node within seconds, without waiting for heartbeats. A round repairs
only what differed in the round before as well (`anti_entropy_forever` says why). Instances only
we hold either reach the peer when it pulls from us, or expire where nobody renews them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence

import structlog

from peers import merge
from peers.digest import Digests
from peers.stock import reconcile_with_stock
from peers.transport import PeerClient, PeerError, PeerRefused, PeerSyncing, PeerUnavailable
from registry.common.clock import Clock
from registry.common.tasks import Pacer, wait_set
from registry.core.registry import Registry
from registry.lifecycle import Lifecycle

log = structlog.get_logger()

# Seconds between a round that saw new differences and the one that repairs what still differs
SETTLE = 1.0


async def reconcile(
    client: PeerClient,
    registry: Registry,
    digests: Digests,
    clock: Clock,
    *,
    seen_before: Collection[str] | None = None,
) -> tuple[int, set[str]]:
    """One round with one peer: how many instances changed here (and overrides taken), and
    the applications whose digests differed. With `seen_before`, only those that differed in
    it too are repaired: a difference seen once may be a change on its way (a deploy keeps a
    few in flight at any moment), and fetching and merging it would only repeat replication."""
    if client.stock:
        return await reconcile_with_stock(client, registry, clock, seen_before=seen_before)
    try:
        answer = await client.fetch_digest()
    except PeerRefused:
        if not client.stock:  # its answer (a 404 without our epoch) told us what it is
            raise
        return await reconcile_with_stock(client, registry, clock, seen_before=seen_before)
    theirs = answer.get("applications")
    if not isinstance(theirs, Mapping):
        raise PeerError(f"{client.url}: the digest answer has no applications")
    ours = await digests.current(Pacer())
    changed = 0
    differing = set()
    for app, digest in theirs.items():
        if not isinstance(app, str) or ours.get(app) == digest:
            continue
        differing.add(app)
        if seen_before is not None and app not in seen_before:
            continue
        document = await client.fetch_application(app)
        removed = merge.removals(await client.fetch_removed(app))
        changed += await merge.merge(
            registry,
            merge.applications(document) if document is not None else [],
            now_ms=clock.wall_ms(),
            removed=removed,
        )
    taken = merge.take_overrides(registry, answer, now_ms=clock.wall_ms())
    taken += merge.take_app_checks(registry, answer, now_ms=clock.wall_ms())
    merge.take_check_holds(registry, answer)
    merge.take_check_releases(registry, answer, now_ms=clock.wall_ms())
    return changed + taken, differing


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
    settle: float = SETTLE,
) -> None:
    """A round every `interval`, at once when `soon` is set (a peer came back), and after
    `retry` when the last round could not reach a peer or found the peers differing: a node
    cut off with nothing to send its peers still pulls what they hold within seconds of the
    heal, and what the peers' queued changes bring after a round (each side applying them in
    its own order) is settled within seconds too, not a whole interval later.

    A round repairs only what differed in the round before it as well; a round that saw new
    differences is followed by one `settle` later. What a deploy's changes on their way make
    differ for a moment is so left to replication, and so is what a returning node's peers
    had queued for it (they send it at once: peers/dispatcher.py), which is most of what
    differs after a restart; fetching all of that too cost the restarted node and its peers
    seconds of CPU."""
    soon = soon or asyncio.Event()
    wait = interval
    differed: dict[str, set[str]] = {}  # by peer: the applications that differed last round
    while True:
        woken = await wait_set(clock, soon, wait)
        soon.clear()
        wait = interval
        for client in peers():
            # A round `soon` asked for, or the first to reach the peer (again), only looks.
            seen_before = set() if woken else differed.pop(client.url, set())
            try:
                changed, differing = await reconcile(
                    client, registry, digests, clock, seen_before=seen_before
                )
            except PeerSyncing:
                continue
            except PeerRefused as exc:  # it answered, and would answer the same: say so
                log.warning("anti_entropy_refused", peer=client.url, detail=str(exc))
                continue
            except PeerError as exc:  # it is down or busy: its dispatcher reports that
                log.debug("anti_entropy_skipped", peer=client.url, detail=str(exc))
                # Unreachable (not merely busy): try again soon, to catch its return.
                if isinstance(exc, PeerUnavailable) and not exc.congested and retry is not None:
                    wait = min(wait, retry)
                continue
            except Exception:
                log.exception("anti_entropy_failed", peer=client.url)
                continue
            if not differing - seen_before:  # level with it: nothing left unrepaired
                lifecycle.synced(f"anti-entropy reached {client.url}")
            differed[client.url] = differing
            if differing - seen_before:
                wait = min(wait, settle)
            elif differing and retry is not None:
                wait = min(wait, retry)
            if changed:
                log.info("anti_entropy_repaired", peer=client.url, changed=changed)
