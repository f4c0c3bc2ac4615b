"""This node's peers: a dispatcher for each, fed by the registry with the commands this node
received from clients and admins (`on_replicate`), and who they are (peers/membership.py): the
`peers.urls` setting, which a reload can change, and what DNS names (peers/peer_dns.py), both
followed while the node runs.

A node skips its own URL (contract 11.1): the one `my_url` names, or one whose port is ours and
whose host is this node's: the address it listens on, or, listening on every address, any
address of this machine; a name, when it is one of this machine's names.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import structlog

from peers.dispatcher import Dispatcher
from peers.membership import DnsLookups, Membership
from peers.pending import Task
from peers.transport import PeerClient, Signer, new_session
from registry.common.clock import Clock
from registry.core.model import InstanceStatus, ReplicationAction
from registry.core.registry import Registry
from registry.core.subscriber import Subscriber
from registry.settings import Settings

log = structlog.get_logger()

DRAIN_TIMEOUT = 3.0  # seconds a stopping node spends sending what its peers are owed


class Cluster(Subscriber):
    def __init__(
        self,
        registry: Registry,
        clock: Clock,
        settings: Settings,
    ) -> None:
        self.dispatchers: dict[str, Dispatcher] = {}
        self._registry = registry
        self._clock = clock
        self._settings = settings
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._signer = (
            Signer(settings.credentials.peer, clock) if settings.credentials.peer else None
        )
        self._local_names: frozenset[str] = frozenset()
        self._local_addresses: set[str] = set()
        self._fanout: tuple[Dispatcher, ...] = ()
        self.membership = Membership(
            grace=settings.peers.dns_grace,
            dns=(
                DnsLookups(settings.peers.dns_name, max_peers=settings.peers.dns_max_peers)
                if settings.peers.dns_name
                else None
            ),
        )
        # Set when a peer that could not be reached answers again: anti-entropy runs at once.
        self.returned = asyncio.Event()

    async def start(self) -> None:
        self._session = new_session(
            connect_timeout=self._settings.peers.connect_timeout,
            read_timeout=self._settings.peers.read_timeout,
        )
        self._local_names = await asyncio.to_thread(local_names, self._settings.server.host)
        self.set_peers(self._settings.peers.urls)

    def heard_from_a_peer(self) -> None:
        """A peer called: each peer that could not be reached is tried again soon (which one
        called is not known: peers are named by URLs, and a request carries no URL)."""
        for dispatcher in self._fanout:
            dispatcher.heard_from_a_peer()

    def set_peers(self, urls: Iterable[str]) -> None:
        """The `peers` setting: replicate to these (and those DNS names) from now on."""
        self.membership.static = tuple(urls)
        self._apply("the peers setting")

    def dns_found(self, urls: Iterable[str], refused: dict[str, int] | None = None) -> None:
        """DNS named these peers, in a stable order (our own address among them is skipped,
        and those beyond `peers.dns_max_peers` are only counted), and refused `refused`."""
        found = [url for url in urls if not self.is_self(url)]
        self.membership.found(
            found, self._clock.monotonic(), self._clock.wall_ms(), refused=refused
        )
        if self._apply("dns"):
            self.returned.set()  # a new peer: compare registries with it now (anti-entropy)

    def dns_failed(self, error: str) -> None:
        """A lookup failed: the peers stay, the failure is told."""
        self.membership.failed(error, self._clock.wall_ms())

    def _apply(self, why: str) -> bool:
        """Start and stop dispatchers to match the membership; whether a peer was added."""
        assert self._session is not None, "start() first"
        wanted = [url for url in self.membership.urls() if not self.is_self(url)]
        now_ms = self._clock.wall_ms()
        for url in list(self.dispatchers):
            if url not in wanted:
                self._runs.pop(url).cancel()
                del self.dispatchers[url]
                self.membership.changed("removed", url, why, now_ms)
                log.info("peer_removed", peer=url, why=why)
        added = False
        for url in wanted:
            if url not in self.dispatchers:
                # Basic, to a peer that refuses the signature, only where the operator
                # listed it and said so: never to a peer a DNS answer named.
                fallback = (
                    self._settings.credentials.peer_basic_fallback and url in self.membership.static
                )
                dispatcher = Dispatcher(
                    PeerClient(self._session, url, self._signer, basic_fallback=fallback),
                    self._registry,
                    self._clock,
                    self._settings,
                    on_return=self.returned.set,
                )
                self.dispatchers[url] = dispatcher
                self._runs[url] = asyncio.create_task(dispatcher.run(), name=f"replicate {url}")
                self.membership.changed("added", url, why, now_ms)
                log.info("peer_added", peer=url, why=why)
                added = True
        self._fanout = tuple(self.dispatchers.values())
        return added

    def members(self) -> list[str]:
        """The nodes that answer and run checks, by their runs' epochs: this one, and each
        peer of ours whose last call was answered and that says it runs them (a node with
        checks off, or an earlier release, takes no share it would never check). What the
        nodes share out their checks over (registry/checks/owner.py): they agree while they
        see the same peers; a node cut off checks everything. A peer that stops answering is
        seen at the next call to it: a batch (within a second while clients heartbeat) or an
        anti-entropy round."""
        alive = [
            d.peer.epoch
            for d in self._fanout
            if d.peer.answering and d.peer.checks and d.peer.epoch is not None
        ]
        return [self._registry.epoch, *alive]

    def clients(self) -> list[PeerClient]:
        return [dispatcher.peer for dispatcher in self.dispatchers.values()]

    def is_self(self, url: str) -> bool:
        mine = self._settings.peers.my_url
        if mine and url.rstrip("/") == mine.rstrip("/"):
            return True
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if port != self._settings.server.port:
            return False
        host = parts.hostname or ""
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return host in self._local_names  # a name
        bound = self._settings.server.host
        if bound in ("", "0.0.0.0", "::"):  # listening on every address this machine has
            return self._is_local(address)
        try:
            return address == ipaddress.ip_address(bound)
        except ValueError:  # bound by name (localhost): the addresses it resolved to
            return host in self._local_names

    def _is_local(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        """This machine has `address`: a loopback one (a listener on every address answers
        them all), or one the kernel would send from to reach it (its own route: what a bind
        test cannot tell where `ip_nonlocal_bind` lets any address be bound). Only a yes is
        remembered: an IPv6 address may still be tentative at start."""
        text = str(address)
        if address.is_loopback or text in self._local_addresses:
            return True
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect((text, 9))  # UDP: nothing is sent, a route is chosen
                source = probe.getsockname()[0]
            except OSError:
                return False
        if ipaddress.ip_address(source.partition("%")[0]) != address:
            return False
        self._local_addresses.add(text)
        return True

    def on_replicate(
        self,
        action: ReplicationAction,
        app: str,
        instance_id: str,
        status: InstanceStatus | None = None,
        last_dirty_ms: int | None = None,
        at_ms: int | None = None,
    ) -> None:
        """Queue a command this node received from a client or an admin for every peer."""
        if not self._fanout:  # a single node: heartbeats pay for nothing more
            return
        task = Task(action, app, instance_id, self._clock.monotonic(), status, last_dirty_ms, at_ms)
        for dispatcher in self._fanout:
            dispatcher.enqueue(task)

    def membership_status(self) -> dict[str, Any]:
        """Who this node is, where its peers come from and how they changed, for `GET status`
        and the page."""
        settings = self._settings
        me = {
            "hostname": socket.gethostname(),  # a pod's name, on Kubernetes
            "listening": f"{settings.server.host}:{settings.server.port}",
            "myUrl": settings.peers.my_url,
        }
        return {"self": me, **self.membership.status(self._clock.monotonic())}

    def status(self) -> list[dict[str, Any]]:
        """Each peer's health, for `GET status`."""
        return [
            {
                "url": url,
                "reachable": d.stats.reachable,
                "lastSuccessTimestamp": d.stats.last_success_ms,
                "lastError": d.stats.last_error,
                "queueDepth": len(d.pending),
                "lagMs": round(d.lag() * 1000),
                "sent": d.stats.sent,
                "retried": d.stats.retried,
                "dropped": d.pending.dropped,
                "droppedHeartbeats": d.pending.dropped_heartbeats,
                "coalesced": d.pending.coalesced,
                "failed": d.stats.failed,
                "reregistered": d.stats.reregistered,
                "adopted": d.stats.adopted,
                "batches": d.stats.batches,
                "lastBatchMs": round(d.stats.last_batch_ms, 1),
            }
            for url, d in self.dispatchers.items()
        ]

    async def aclose(self) -> None:
        """Send what is owed (bounded in time), then stop every dispatcher and the session."""
        await asyncio.gather(*(d.drain(DRAIN_TIMEOUT) for d in self.dispatchers.values()))
        for run in self._runs.values():
            run.cancel()
        await asyncio.gather(*self._runs.values(), return_exceptions=True)
        self._runs.clear()
        self._fanout = ()
        if self._session is not None:
            await self._session.close()


def local_names(host: str) -> frozenset[str]:
    """Names and addresses that reach this machine (blocking: resolves its own name)."""
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname()}
    if host not in ("", "0.0.0.0", "::"):
        names.add(host)
    try:
        names.add(socket.getfqdn())
        for *_, address in socket.getaddrinfo(socket.gethostname(), None):
            names.add(str(address[0]))
    except OSError:
        pass  # a machine that cannot resolve its own name: the names above still work
    return frozenset(names)
