"""Start-up sync: copy the registry from a peer before serving reads (contract 11.5, 15):
its instances, the removals it remembers (so that nothing it removed comes back from here)
and its overrides. From a stock Eureka server (known by its answers: peers/transport.py),
its registry alone, which is all Eureka's own nodes copy from each other, and from every stock
peer that answers: a stock server serves reads before it has copied its own peers.

Attempts go to each peer in turn, with growing pauses, for at most `peers.sync_budget` seconds.
Reads open as soon as one peer's registry has been copied, or when every peer answers that it
is starting too (a new cluster: there is nothing to copy), or when there is no peer at all and
none can be missing (`peers_unknown`: DNS has not answered yet). The peers are asked for at
each attempt: one DNS names meanwhile is tried too. If no peer can be reached in the
budget, reads stay closed (403, saying why) until anti-entropy reaches a peer or
`peers.sync_empty_window` has passed since start, whichever comes first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from peers import merge
from peers.transport import PeerClient, PeerError, PeerSyncing
from registry.common.clock import Clock
from registry.core.registry import Registry
from registry.lifecycle import Lifecycle, Phase

log = structlog.get_logger()

_MAX_PAUSE = 5.0


async def sync_at_start(
    peers: Callable[[], Sequence[PeerClient]],
    registry: Registry,
    clock: Clock,
    lifecycle: Lifecycle,
    *,
    budget: float,
    empty_window: float,
    peers_unknown: Callable[[], str] = lambda: "",
) -> None:
    """Copy a peer's registry, then serve reads (`lifecycle` SYNCING -> SERVING), or when it
    is no use waiting; ends early when something else (anti-entropy) got there first."""
    started = clock.monotonic()
    pause = 0.5
    while lifecycle.phase is Phase.SYNCING:
        clients = peers()
        problems: list[str] = []
        if not clients:
            if not (unknown := peers_unknown()):
                lifecycle.synced("no peers to copy from")
                return
            problems.append(unknown)
        starting = 0
        copied_from: list[str] = []
        for client in clients:
            try:
                document = await client.fetch_registry()
                if client.stock:
                    # A stock Eureka server has no removals or digest to give (404): its
                    # registry is the whole copy, overrides riding in its instances, as
                    # Eureka's own nodes copy each other.
                    removed, digest = [], {}
                else:
                    removed = merge.removals(await client.fetch_removed())
                    digest = await client.fetch_digest()
            except PeerSyncing:
                starting += 1
                continue
            except PeerError as exc:
                problems.append(str(exc))
                continue
            copied = await merge.merge(
                registry, merge.applications(document), now_ms=clock.wall_ms(), removed=removed
            )
            merge.take_overrides(registry, digest, now_ms=clock.wall_ms())
            merge.take_app_checks(registry, digest, now_ms=clock.wall_ms())
            merge.take_check_holds(registry, digest)
            kind = " (a stock Eureka server)" if client.stock else ""
            log.info(
                "peer_sync_done",
                peer=client.url,
                instances=copied,
                removals=len(removed),
                stock=bool(client.stock),
            )
            copied_from.append(f"{copied} instances from {client.url}{kind}")
            if not client.stock:
                break  # a peer of ours holds all its peers hold
            # A stock server may answer before it has copied its own peers (it serves reads
            # while its start-up sync waits and retries), so every stock peer is copied.
        if copied_from:
            lifecycle.synced("copied " + ", ".join(copied_from))
            return
        if clients and starting == len(clients):
            lifecycle.synced("every peer is starting too (a new cluster): nothing to copy")
            return
        elapsed = clock.monotonic() - started
        if elapsed >= budget:
            break
        lifecycle.still_syncing(
            "copying the registry from peers; none reachable yet: " + "; ".join(problems)
        )
        await clock.sleep(min(pause, budget - elapsed))
        pause = min(_MAX_PAUSE, pause * 2)
    if lifecycle.phase is not Phase.SYNCING:
        return  # anti-entropy reached a peer first
    remaining = empty_window - (clock.monotonic() - started)
    log.warning("peer_sync_failed", problems=problems, reads_closed_for=round(max(remaining, 0)))
    if remaining > 0:
        lifecycle.still_syncing(
            f"no peer could be copied within {budget:g} s ({'; '.join(problems)}); reads "
            f"open when a peer is reached, or in {remaining:.0f} s at the latest"
        )
        await clock.sleep(remaining)
    lifecycle.synced("the empty-sync window ended without a peer")
