"""A node's place among its peers for the server's run, and what it serves at start.

The cluster is started (peers/cluster.py) and, with `peers.dns_name`, its first answer awaited: it
decides whether there are peers to copy. Anti-entropy (anti_entropy.py) and the DNS lookups
run until shutdown. The start decides when reads open:
- restored state is served at once, and brought level with the peers at once: what they
  removed or changed while this node was down;
- otherwise, with peers (or DNS that has not told yet whether there are any), SYNCING while
  the registry is copied from them (startup_sync.py);
- with no peer and a store that could not be restored, SYNCING for `peers.sync_empty_window`
  (clients' heartbeats are answered 404 meanwhile, so they register again), unless
  `store.serve_empty`;
- else SERVING.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from peers.anti_entropy import anti_entropy_forever
from peers.cluster import Cluster
from peers.digest import Digests
from peers.startup_sync import sync_at_start
from registry.common.clock import Clock
from registry.common.tasks import Loops
from registry.core.registry import Registry
from registry.lifecycle import Lifecycle, Phase
from registry.settings import Settings


async def joined(
    cluster: Cluster,
    registry: Registry,
    digests: Digests,
    clock: Clock,
    lifecycle: Lifecycle,
    settings: Settings,
    *,
    restored: Callable[[], int],
    store_lost: Callable[[], str],
) -> AsyncIterator[None]:
    """`restored`: how many instances the store brought back; `store_lost`: why a store held
    nothing to restore ("" if it did, may have, or there is none). Both asked as the run
    starts, after the store's restore."""
    peer_dns = None
    if settings.peers.dns_name:
        # Imported only when used: dnspython takes 30 ms to import, which every start of a
        # node without peers.dns_name would pay.
        from peers.peer_dns import PeerDns, refresh

        peer_dns = PeerDns(settings)
    try:
        await cluster.start()
        if peer_dns is not None:  # the first lookup decides whether to sync from peers
            await refresh(peer_dns, cluster)
    except BaseException:  # a start stopped here: its session is closed again
        await cluster.aclose()
        raise
    if restored():
        cluster.returned.set()  # anti-entropy at once
    async with Loops(clock) as loops:
        loops.start(
            lambda: anti_entropy_forever(
                cluster.clients,
                registry,
                digests,
                clock,
                lifecycle,
                interval=settings.peers.anti_entropy_interval,
                retry=settings.peers.probe_interval,
                soon=cluster.returned,
            ),
            name="anti_entropy",
        )
        if peer_dns is not None:
            loops.every(
                settings.peers.dns_interval, lambda: refresh(peer_dns, cluster), name="peer_dns"
            )
        dns = cluster.membership.dns
        peers_expected = cluster.dispatchers or (dns is not None and not dns.answered)
        if peers_expected and not restored():
            lifecycle.move(Phase.SYNCING, "copying the registry from peers")
            loops.start(
                lambda: sync_at_start(
                    cluster.clients,
                    registry,
                    clock,
                    lifecycle,
                    budget=settings.peers.sync_budget,
                    empty_window=settings.peers.sync_empty_window,
                    peers_unknown=lambda: _dns_silent(cluster),
                ),
                name="peer_sync",
            )
        elif store_lost() and not settings.store.serve_empty:
            window = settings.peers.sync_empty_window
            lifecycle.move(
                Phase.SYNCING,
                f"the store could not be restored ({store_lost()}) and there is no peer to "
                f"copy: reads open in {window:g} s, once clients have registered again (their "
                "heartbeats are answered 404 meanwhile), or at once with store.serve_empty",
            )
            loops.start(
                lambda: _open_reads_after(clock, lifecycle, window), name="empty_store_window"
            )
        else:
            lifecycle.move(Phase.SERVING, lifecycle.reason if restored() else "serving")
        yield
    await cluster.aclose()


def _dns_silent(cluster: Cluster) -> str:
    """Why peers may be missing from the list yet: DNS never answered ("" once it has)."""
    dns = cluster.membership.dns
    if dns is None or dns.answered:
        return ""
    return f"peers.dns_name has not answered yet ({dns.last_error})"


async def _open_reads_after(clock: Clock, lifecycle: Lifecycle, window: float) -> None:
    await clock.sleep(window)
    lifecycle.synced(f"served empty after {window:g} s: the store could not be restored")
