"""SIGHUP: the settings read again from the same sources (file, environment, flags), while the
server runs; the peer list and the credentials take effect, the rest takes a restart.

A reload that fails (a bad edit) keeps the settings in force and says why: it must not take the
node down. Credentials are not turned on or off by a reload: a node started without them guards
none of its routes, and removing every credential would open every plane to anyone.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable

import structlog

from peers.cluster import Cluster
from registry.common.clock import Clock
from registry.common.tasks import Loops
from registry.http.credentials import Credentials
from registry.settings import Settings

log = structlog.get_logger()

Reload = Callable[[], Settings]


async def on_sighup(
    reload: Reload,
    settings: Settings,
    clock: Clock,
    cluster: Cluster,
    credentials: Credentials | None,
) -> AsyncIterator[None]:
    """While the server runs, each SIGHUP reloads (`settings`: those it started with)."""
    loop = asyncio.get_running_loop()
    async with Loops(clock) as loops:
        loop.add_signal_handler(
            signal.SIGHUP,
            lambda: loops.start(
                lambda: _reload(reload, settings, cluster, credentials), name="reload"
            ),
        )
        yield
        loop.remove_signal_handler(signal.SIGHUP)


async def _reload(
    reload: Reload, started: Settings, cluster: Cluster, credentials: Credentials | None
) -> None:
    try:
        settings = await asyncio.to_thread(reload)
    except Exception as exc:  # a bad edit must not take the node down: keep the old settings
        log.error("settings_reload_failed", detail=str(exc))
        return
    cluster.set_peers(settings.peers.urls)
    if settings.peers.dns() != started.peers.dns():
        log.warning("peer_dns_not_reloaded", reason="the peers.dns_* settings take a restart")
    applied = _reload_credentials(credentials, settings)
    log.info("settings_reloaded", peers=list(cluster.dispatchers), credentials=applied)


def _reload_credentials(current: Credentials | None, settings: Settings) -> str:
    """Take the reloaded credentials; what was done ("applied", "none", or "kept" with a
    warning saying why)."""
    if current is None and settings.secured:
        log.warning(
            "credentials_not_reloaded",
            reason="this node started without credentials, so none of its routes is guarded: "
            "restart it to turn them on",
        )
        return "kept"
    if current is None:
        return "none"
    if not settings.secured:
        log.warning(
            "credentials_not_reloaded",
            reason="removing every credential would open every plane to anyone: restart the "
            "node to turn them off",
        )
        return "kept"
    current.update(settings)
    return "applied"
