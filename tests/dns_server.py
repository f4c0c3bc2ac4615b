"""A DNS server on loopback for the tests of peers from DNS: answers A, AAAA and SRV queries
from tables a test changes while it runs, and can stop answering (queries are dropped, as by a
server that is down or cut off). UDP only, which is all a resolver uses for answers this small.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

TTL = 1


class StubDns(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.addresses: dict[str, list[str]] = {}  # name -> addresses (A or AAAA by their form)
        self.services: dict[str, list[tuple[str, int]]] = {}  # name -> SRV (target, port)
        self.answering = True
        self.queries = 0
        self.port = 0
        self._transport: asyncio.DatagramTransport | None = None

    @property
    def server(self) -> str:
        """As `peer_dns_nameservers` names it."""
        return f"127.0.0.1:{self.port}"

    def set(self, name: str, addresses: Iterable[str]) -> None:
        self.addresses[_key(name)] = list(addresses)

    def set_srv(self, name: str, targets: Iterable[tuple[str, int]]) -> None:
        self.services[_key(name)] = list(targets)

    async def start(self) -> StubDns:
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: self, local_addr=("127.0.0.1", 0)
        )
        self._transport = transport
        self.port = transport.get_extra_info("sockname")[1]
        return self

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.queries += 1
        if not self.answering or self._transport is None:
            return
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        question = query.question[0]
        name = _key(question.name.to_text())
        if name not in self.addresses and name not in self.services:
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif question.rdtype == dns.rdatatype.SRV and name in self.services:
            records = [f"0 10 {port} {_absolute(t)}" for t, port in self.services[name]]
            response.answer.append(dns.rrset.from_text_list(name + ".", TTL, "IN", "SRV", records))
        elif question.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            family = ":" if question.rdtype == dns.rdatatype.AAAA else "."
            kind = dns.rdatatype.to_text(question.rdtype)
            found = [a for a in self.addresses.get(name, []) if family in a]
            if found:
                response.answer.append(dns.rrset.from_text_list(name + ".", TTL, "IN", kind, found))
        self._transport.sendto(response.to_wire(), addr)


def _absolute(name: str) -> str:
    return name if name.endswith(".") else name + "."


def _key(name: str) -> str:
    return name.rstrip(".").lower()
