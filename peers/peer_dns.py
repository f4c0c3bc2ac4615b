"""Peers from DNS (`peers.dns_name`): the name looked up at start and every `peers.dns_interval`.

A name with SRV records (`_http._tcp.registry.ns.svc.cluster.local`, or a headless Service's
own name) gives each target at its port (`peers.dns_port` where a target has several); any
other name, each of its addresses at `peers.dns_port`: IPv4 when it has any, else IPv6 (a
dual-stack pod must not be two peers). A lookup, every query in it, takes
`min(LOOKUP_TIMEOUT, peers.dns_interval)` at most.
Peers are named by address, `http://10.0.0.5:8761/eureka/`, so a node knows itself by its own
addresses (peers/cluster.py), never by comparing host names.

Lookups go through dnspython's asyncio resolver: pure Python (nothing to compile in the image),
SRV and AAAA as well as A, the system's resolv.conf (search domains and all, as a pod's DNS
needs) or explicit `peers.dns_nameservers` with their ports. Its cache is off: a peer's new
address should be seen at the next lookup.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import dns.asyncresolver
import dns.exception
import dns.name
import dns.nameserver
import dns.resolver
import structlog

from peers.cluster import Cluster
from peers.peer_addresses import Screen
from registry.settings import Settings, nameserver

log = structlog.get_logger()

ATTEMPT_TIMEOUT = 1.0  # seconds one name server has to answer one query
LOOKUP_TIMEOUT = 5.0  # seconds a whole lookup may take (every server, every query), at most


class LookupFailed(Exception):
    """DNS did not answer, or said the name does not exist."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What one lookup gave: the peers' URLs, and the addresses refused, counted by why
    (peers/peer_addresses.py)."""

    urls: list[str]
    refused: dict[str, int] = field(default_factory=dict)


class PeerDns:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._resolver: dns.asyncresolver.Resolver | None = None
        self._screen = Screen.for_host(settings.server.host)

    async def lookup(self) -> Answer:
        """The peers the name gives now, and the addresses refused; LookupFailed when it
        cannot be told (within the lookup's time, every query included)."""
        resolver = await self._get_resolver()
        name = self._settings.peers.dns_name
        try:
            async with asyncio.timeout(resolver.lifetime):
                found = await self._found(resolver, name)
        except TimeoutError:
            raise LookupFailed(f"{name}: no answer within {resolver.lifetime:g} s") from None
        except dns.resolver.NXDOMAIN:
            raise LookupFailed(f"{name} does not exist (NXDOMAIN)") from None
        except (dns.exception.DNSException, OSError) as exc:
            raise LookupFailed(f"{name}: {exc or type(exc).__name__}") from None
        return self._screened(found)

    async def _found(self, resolver: dns.asyncresolver.Resolver, name: str) -> set[tuple[str, int]]:
        """Every (address, port) the name gives."""
        srv = await resolver.resolve(name, "SRV", search=True, raise_on_no_answer=False)
        if srv.rrset is None:
            port = self._settings.peers.dns_port
            return {(a, port) for a in await _addresses(resolver, name)}
        targets = _srv_targets(
            ((r.target, r.port) for r in srv), wanted_port=self._settings.peers.dns_port
        )
        found = await asyncio.gather(
            *(_target_addresses(resolver, target) for target, _ in targets)
        )
        return {
            (address, port)
            for (_, port), addresses in zip(targets, found, strict=True)
            for address in addresses
        }

    def _screened(self, found: set[tuple[str, int]]) -> Answer:
        """The peers' URLs in a stable order (by address, then port), the addresses no peer
        can have left out and counted by why."""
        refused: Counter[str] = Counter()
        taken = []
        for address, port in found:
            why = self._screen.refusal(address)
            if why is None:
                taken.append((ipaddress.ip_address(address), port))
            else:
                refused[why] += 1
        taken.sort(key=lambda a: (a[0].version, a[0], a[1]))
        return Answer([self._url(str(a), port) for a, port in taken], dict(refused))

    async def _get_resolver(self) -> dns.asyncresolver.Resolver:
        if self._resolver is None:
            try:
                self._resolver = await asyncio.to_thread(self._make_resolver)
            except dns.exception.DNSException as exc:  # no resolv.conf, or one without servers
                raise LookupFailed(f"no name servers to ask: {exc}") from None
        return self._resolver

    def _make_resolver(self) -> dns.asyncresolver.Resolver:
        """(Blocking: reads resolv.conf when no name servers are set.)"""
        servers = self._settings.peers.dns_nameservers
        resolver = dns.asyncresolver.Resolver(configure=not servers)
        if servers:
            resolver.nameservers = [
                dns.nameserver.Do53Nameserver(*nameserver(server)) for server in servers
            ]
        resolver.cache = None
        resolver.timeout = ATTEMPT_TIMEOUT
        resolver.lifetime = min(LOOKUP_TIMEOUT, self._settings.peers.dns_interval)
        return resolver

    def _url(self, address: str, port: int) -> str:
        host = f"[{address}]" if ":" in address else address
        return f"http://{host}:{port}{self._settings.peers.dns_path}"


async def _addresses(
    resolver: dns.asyncresolver.Resolver, name: dns.name.Name | str, *, search: bool = True
) -> list[str]:
    for kind in ("A", "AAAA"):
        answer = await resolver.resolve(name, kind, search=search, raise_on_no_answer=False)
        if answer.rrset is not None:
            return [r.to_text() for r in answer]
    return []


async def _target_addresses(
    resolver: dns.asyncresolver.Resolver, target: dns.name.Name
) -> list[str]:
    """An SRV target's addresses; none when it has gone (a pod deleted between the two
    answers is routine in a roll, and no reason to call the whole lookup failed)."""
    try:
        return await _addresses(resolver, target, search=False)  # a target is absolute
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return []


def _srv_targets(
    records: Iterable[tuple[dns.name.Name, int]], *, wanted_port: int
) -> list[tuple[dns.name.Name, int]]:
    """One port per target: a Service with several ports (metrics beside the API) lists each
    pod once per port; `peers.dns_port` is the one chosen where it is among them. The root
    target (`.`: "no such service here") is no peer."""
    ports: dict[dns.name.Name, list[int]] = {}
    for target, port in records:
        if target != dns.name.root:
            ports.setdefault(target, []).append(port)
    return [
        (target, wanted_port if wanted_port in listed else listed[0])
        for target, listed in ports.items()
    ]


async def refresh(peer_dns: PeerDns, cluster: Cluster) -> None:
    """Look the name up once and apply what it gave (or keep the peers, saying why)."""
    dns_state = cluster.membership.dns
    assert dns_state is not None
    try:
        answer = await peer_dns.lookup()
    except LookupFailed as exc:
        first = dns_state.failing_since_ms is None
        cluster.dns_failed(str(exc))
        # Said once when the failures begin, then at debug: a long outage is not a log flood.
        (log.warning if first else log.debug)(
            "peer_dns_failed", detail=str(exc), keeping=len(cluster.dispatchers)
        )
        return
    if dns_state.failing_since_ms is not None:
        log.info("peer_dns_answers_again", name=dns_state.name, found=len(answer.urls))
    were_dropped, were_refused = dns_state.dropped, bool(dns_state.refused)
    cluster.dns_found(answer.urls, answer.refused)
    # Each said once when it begins (the next answers say the same; GET status and /metrics
    # keep the count), and again only after an answer without any.
    if dns_state.dropped and not were_dropped:
        log.warning(
            "peer_dns_capped",
            name=dns_state.name,
            named=len(dns_state.found) + dns_state.dropped,
            kept=len(dns_state.found),
            dropped=dns_state.dropped,
        )
    if dns_state.refused and not were_refused:
        log.warning("peer_dns_refused", name=dns_state.name, refused=dns_state.refused)
