"""Addresses no peer can have: what a DNS answer may name that is never taken as a peer.

A peer is another node of the cluster, reached over the network this node serves on. So an
answer naming the unspecified address, a multicast or broadcast one, a reserved or
documentation range, or a cloud's metadata service is refused, whatever the answer says;
loopback is a peer's only when this node itself listens on loopback (nodes of one machine, as
tests run them), and link-local only when this node listens on a link-local address. An
IPv4-mapped IPv6 address is judged as the IPv4 address it carries.

Pure: the verdict is a function of the address and of where this node listens.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata services (AWS and GCP at 169.254.169.254, AWS's IPv6 one, ECS task
# metadata, Alibaba's): a credential sent there is an instance's credentials away.
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)
# "This network" (0.0.0.0/8) and the ranges set aside for documentation: no machine has them.
_NOWHERE = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "192.0.2.0/24",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "2001:db8::/32",
    )
)
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


@dataclass(frozen=True, slots=True)
class Screen:
    """Where this node listens decides which of loopback and link-local a peer may use."""

    loopback: bool  # this node listens on loopback: peers on loopback are nodes of this machine
    link_local: bool  # this node listens on a link-local address

    @classmethod
    def for_host(cls, host: str) -> Screen:
        """The screen of a node bound to `host` (the `host` setting)."""
        if host == "localhost":
            return cls(loopback=True, link_local=False)
        try:
            bound = _unmapped(ipaddress.ip_address(host))
        except ValueError:  # a name: nothing it says about loopback or link-local
            return cls(loopback=False, link_local=False)
        return cls(loopback=bound.is_loopback, link_local=bound.is_link_local)

    def refusal(self, text: str) -> str | None:
        """Why `text` cannot be a peer's address (a short word), or None when it can."""
        try:
            address = _unmapped(ipaddress.ip_address(text.partition("%")[0]))
        except ValueError:
            return "not an address"
        if address in METADATA:
            return "metadata"
        if address.is_unspecified or any(address in net for net in _NOWHERE):
            return "unspecified"
        if address.is_multicast:
            return "multicast"
        if address == _BROADCAST:
            return "broadcast"
        if address.is_loopback:
            return None if self.loopback else "loopback"
        if address.is_link_local:
            return None if self.link_local else "link-local"
        if address.is_reserved:
            return "reserved"
        return None


def _unmapped(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
