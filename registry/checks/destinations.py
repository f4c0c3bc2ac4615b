"""Where a check may go: the operator's decision, not the client's.

A check connects to an instance's `ipAddr`, which is what its client says. So:

- never, whatever the settings: this node's own addresses (a service bound to 0.0.0.0 here
  answers on them), the cloud metadata addresses, 0.0.0.0/8 and the unspecified, multicast,
  broadcast and reserved addresses;
- loopback and link-local addresses only with `checks.loopback` (tests, one machine);
- an address a client gave (any instance but one the registry holds the lease of, which only
  an admin registers): a public (globally routable) address, or one in
  `checks.networks`; private ranges, CGNAT and the like only when listed there;
- an address an admin gave (an instance the registry holds): anywhere else.

IPv6 forms of an IPv4 address (mapped, 6to4, Teredo, NAT64) are judged, and checked, as that
address. Pure, but for `own_addresses`, which asks the system once at start.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

import psutil

from registry.errors import BadInput
from registry.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Where clouds answer with their instances' metadata and credentials: AWS (and GCP, Azure's
# IMDS, OpenStack) by IPv4 and IPv6, AWS ECS's task metadata, Alibaba, Azure's wire server,
# Oracle.
METADATA = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",
        "fd00:ec2::254",
        "169.254.170.2",
        "100.100.100.200",
        "168.63.129.16",
        "192.0.0.192",
    )
)
_OUTSIDE = (
    "not a public address, nor in checks.networks (the networks instances live in, "
    "which the operator lists)"
)
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # "this host on this network"
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class OutsideNetworks(BadInput):
    """A client's check of a private address outside `checks.networks`: the instance is
    registered all the same, unchecked (a registry upgraded before its networks are listed
    must not turn its services' registrations away)."""


class Destinations:
    """The rules above for one node: its settings and its own addresses."""

    def __init__(self, settings: Settings, own: Iterable[str] = ()) -> None:
        self.loopback = settings.checks.loopback
        self.networks: tuple[IPNetwork, ...] = tuple(
            ipaddress.ip_network(network, strict=False) for network in settings.checks.networks
        )
        self.own: frozenset[IPAddress] = frozenset()
        self.know_own(own)

    def know_own(self, addresses: Iterable[str]) -> None:
        """This node's own addresses (`own_addresses`), refused from now on."""
        own = set(self.own)
        for address in addresses:
            try:
                own.add(unwrapped(ipaddress.ip_address(address.partition("%")[0])))
            except ValueError:
                continue
        self.own = frozenset(own)

    def address(self, ip_addr: str, *, client: bool) -> str:
        """The address to check for an instance whose `ipAddr` is `ip_addr`; BadInput naming
        `ipAddr` when a check may not go there (`client`: a client gave it)."""
        try:
            address = unwrapped(ipaddress.ip_address(ip_addr))
        except ValueError:
            raise BadInput(
                "ipAddr", f"{ip_addr[:64]!r} is not an address: a checked instance is checked there"
            ) from None
        why = self.refusal(address, client=client)
        if why is not None:
            refused = OutsideNetworks if why is _OUTSIDE else BadInput
            raise refused("ipAddr", f"{ip_addr} is {why}: not checked from the registry")
        return str(address)

    def refusal(self, address: IPAddress, *, client: bool) -> str | None:
        """Why a check may not go to `address` (unwrapped), or None when it may."""
        if address in METADATA:
            return "a cloud metadata address"
        if address.is_unspecified or address in _THIS_NETWORK:
            return "an unspecified address (0.0.0.0/8, ::)"
        if address.is_multicast or address == ipaddress.IPv4Address("255.255.255.255"):
            return "a multicast or broadcast address"
        local = address.is_loopback or address.is_link_local
        if local:
            if self.loopback:
                return None
            return "a loopback or link-local address (checks.loopback allows them)"
        if address in self.own:
            return "an address of this registry node"
        if address.is_reserved:
            return "a reserved address"
        if not client or address.is_global or any(address in n for n in self.networks):
            return None
        return _OUTSIDE


def unwrapped(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (mapped ::ffff:a.b.c.d, 6to4, Teredo, NAT64),
    else the address itself: Python 3.11 judges ::ffff:127.0.0.1 as no loopback."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def own_addresses(host: str) -> set[str]:
    """The addresses this machine answers on: every interface's (psutil reads the system's
    tables on each platform), the one it listens on, and those its name resolves to (a NAT or
    a load balancer's address given to it). Blocking (it resolves the machine's own name): run
    it off the loop, once."""
    found = {host}
    for addresses in psutil.net_if_addrs().values():
        found.update(a.address for a in addresses if a.family in (socket.AF_INET, socket.AF_INET6))
    try:
        for name in {socket.gethostname(), socket.getfqdn()}:
            for *_, sockaddr in socket.getaddrinfo(name, None):
                found.add(str(sockaddr[0]))
    except OSError:
        pass  # a machine that cannot resolve its own name: its interfaces still count
    return found
