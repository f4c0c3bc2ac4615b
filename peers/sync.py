"""Start-up sync: copy the registry from a peer before serving reads (contract 11.5, 15).

Attempts go to each peer in turn, with growing pauses, for at most `peer_sync_budget` seconds.
Reads open as soon as one peer's registry has been copied, or when every peer answers that it
is starting too (a new cluster: there is nothing to copy). If no peer can be reached in the
budget, reads stay closed (403, saying why) until anti-entropy reaches a peer or
`peer_sync_empty_window` has passed since start, whichever comes first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from peers import merge
from peers.client import PeerClient, PeerError, PeerSyncing
from registry.clock import Clock
from registry.core import Registry
from registry.gate import ReadGate

log = structlog.get_logger()

_MAX_PAUSE = 5.0


async def sync_at_start(
    peers: Callable[[], Sequence[PeerClient]],
    registry: Registry,
    clock: Clock,
    gate: ReadGate,
    *,
    budget: float,
    empty_window: float,
) -> None:
    """Copy a peer's registry, opening `gate` when done (or when it is no use waiting)."""
    started = clock.monotonic()
    pause = 0.5
    while True:
        clients = peers()
        if not clients:
            gate.open("no peers to copy from")
            return
        problems: list[str] = []
        starting = 0
        for client in clients:
            try:
                document = await client.fetch_registry()
            except PeerSyncing:
                starting += 1
                continue
            except PeerError as exc:
                problems.append(str(exc))
                continue
            copied = await merge.merge(
                registry, merge.applications(document), now_ms=clock.wall_ms()
            )
            log.info("peer_sync_done", peer=client.url, instances=copied)
            gate.open(f"copied {copied} instances from {client.url}")
            return
        if starting == len(clients):
            gate.open("every peer is starting too (a new cluster): nothing to copy")
            return
        elapsed = clock.monotonic() - started
        if elapsed >= budget:
            break
        gate.close("copying the registry from peers; none reachable yet: " + "; ".join(problems))
        await clock.sleep(min(pause, budget - elapsed))
        pause = min(_MAX_PAUSE, pause * 2)
    remaining = empty_window - (clock.monotonic() - started)
    log.warning("peer_sync_failed", problems=problems, reads_closed_for=round(max(remaining, 0)))
    if remaining > 0:
        gate.close(
            f"no peer could be copied within {budget:g} s ({'; '.join(problems)}); reads "
            f"open when a peer is reached, or in {remaining:.0f} s at the latest"
        )
        await clock.sleep(remaining)
    gate.open("the empty-sync window ended without a peer")
