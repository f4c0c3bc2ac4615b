"""Where a check may go (registry/checks/destinations.py), what Host it sends
(registry/checks/spec.py), how fast checks start (registry/checks/pacing.py) and how many
instances one credential may have checked (registry/checks/quota.py): the pure parts."""

from __future__ import annotations

import ipaddress
import socket
from itertools import chain
from socket import AF_INET, AF_INET6

import psutil
import pytest

from registry import Settings
from registry.checks.destinations import (
    Destinations,
    OutsideNetworks,
    own_addresses,
    unwrapped,
)
from registry.checks.pacing import AddressSlots, node_bucket
from registry.checks.quota import CheckQuota
from registry.checks.spec import check_spec, public_name
from registry.codec import instance_from_wire
from registry.errors import BadInput, LimitReached
from tests.helpers import instance_doc

ALWAYS_REFUSED = [
    "169.254.169.254",
    "fd00:ec2::254",
    "100.100.100.200",
    "168.63.129.16",
    "192.0.0.192",
    "::ffff:100.100.100.200",
    "0.0.0.0",
    "0.1.2.3",
    "::",
    "224.0.0.1",
    "255.255.255.255",
    "240.0.0.1",
]


class TestDestinations:
    @pytest.mark.parametrize("address", ALWAYS_REFUSED)
    def test_metadata_and_special_addresses_are_refused_whatever_the_settings(self, address):
        everything = Settings.of(checks__loopback=True, checks__networks=("0.0.0.0/0", "::/0"))
        for client in (True, False):
            with pytest.raises(BadInput, match="ipAddr"):
                Destinations(everything).address(address, client=client)

    @pytest.mark.parametrize(
        ("address", "why"),
        [
            ("169.254.169.254", "a cloud metadata address"),
            ("0.0.0.0", "an unspecified address"),
            ("0.1.2.3", "an unspecified address"),  # "this network", 0.0.0.0/8
            ("::", "an unspecified address"),
            ("224.0.0.1", "a multicast or broadcast address"),
            ("ff02::1", "a multicast or broadcast address"),
            ("255.255.255.255", "a multicast or broadcast address"),
            ("fe80::1", "a loopback or link-local address"),
            ("169.254.1.1", "a loopback or link-local address"),
            ("::1", "a loopback or link-local address"),
            # Teredo whose client is 127.0.0.1 (its last 32 bits, inverted)
            ("2001:0:4136:e378:8000:63bf:80ff:fffe", "a loopback or link-local address"),
            ("240.0.0.1", "a reserved address"),
        ],
    )
    def test_each_special_address_is_refused_for_what_it_is(self, address, why):
        """Each by its own rule, not by a later one that happens to catch it too."""
        for client in (True, False):
            with pytest.raises(BadInput, match=f"is {why}"):
                Destinations(Settings()).address(address, client=client)

    def test_the_nodes_own_addresses_are_refused_to_admins_too(self):
        destinations = Destinations(
            Settings.of(checks__networks=("10.0.0.0/8",)), own=["10.1.2.3", "fe80::1%eth0"]
        )
        assert "10.1.2.4" == destinations.address("10.1.2.4", client=True)
        for written in ("10.1.2.3", "::ffff:10.1.2.3"):
            with pytest.raises(BadInput, match="this registry node"):
                destinations.address(written, client=False)

    @pytest.mark.parametrize(
        "address", ["10.0.0.5", "172.16.0.1", "192.168.1.1", "100.64.0.1", "fd12::1"]
    )
    def test_a_clients_private_address_only_in_the_networks_listed(self, address):
        with pytest.raises(BadInput, match=r"checks\.networks"):
            Destinations(Settings()).address(address, client=True)
        listed = Settings.of(checks__networks=("10.0.0.0/8", "172.16.0.0/12", "fd00::/8"))
        if address.startswith(("10.", "172.", "fd")):
            assert address == Destinations(listed).address(address, client=True)
        # An admin's instance (one the registry holds the lease of) may be anywhere else.
        assert address == Destinations(Settings()).address(address, client=False)

    def test_a_public_address_is_allowed_by_default(self):
        assert "8.8.8.8" == Destinations(Settings()).address("8.8.8.8", client=True)

    def test_loopback_only_with_health_check_loopback(self):
        with pytest.raises(BadInput, match=r"checks\.loopback"):
            Destinations(Settings()).address("127.0.0.1", client=False)
        allowed = Destinations(Settings.of(checks__loopback=True), own=["127.0.0.1"])
        assert "127.0.0.1" == allowed.address("127.0.0.1", client=True)

    def test_own_addresses_name_the_address_it_listens_on(self):
        assert "10.9.8.7" in own_addresses("10.9.8.7")

    def test_own_addresses_are_every_interfaces_ip_addresses_and_the_names(self, monkeypatch):
        """The machine's name and its fully qualified name each resolve (here, as a resolver
        of a NAT'd machine would answer) to an address no interface has."""
        interfaces = psutil.net_if_addrs().values()
        ip = {a.address for a in chain(*interfaces) if a.family in (AF_INET, AF_INET6)}
        others = {a.address for a in chain(*interfaces) if a.family not in (AF_INET, AF_INET6)}
        names = {"orders-7": "203.0.113.9", "orders-7.example.com": "2001:db8::9"}

        def resolve(name: str, port: None) -> list[tuple[object, ...]]:
            if name not in names or port is not None:
                raise socket.gaierror(f"no such name: {name}")
            return [(AF_INET6, 1, 6, "", (names[name], 0, 0, 0))]

        monkeypatch.setattr(socket, "gethostname", lambda: "orders-7")
        monkeypatch.setattr(socket, "getfqdn", lambda: "orders-7.example.com")
        monkeypatch.setattr(socket, "getaddrinfo", resolve)
        found = own_addresses("10.9.8.7")
        assert ip | {"10.9.8.7", *names.values()} == found
        assert not others & found  # no hardware (AF_PACKET, AF_LINK) addresses

    def test_own_addresses_without_a_resolvable_name_are_the_interfaces(self, monkeypatch):
        def unresolved(*_: object) -> list[object]:
            raise socket.gaierror("no such name")

        monkeypatch.setattr(socket, "getaddrinfo", unresolved)
        assert "10.9.8.7" in own_addresses("10.9.8.7")

    def test_the_networks_may_be_written_with_host_bits(self):
        listed = Destinations(Settings.of(checks__networks=("10.1.2.3/8",)))
        assert "10.200.0.1" == listed.address("10.200.0.1", client=True)

    def test_own_addresses_are_learned_past_what_is_no_address_and_added_up(self):
        destinations = Destinations(Settings(), own=["eth0", "fe80::1%eth0", "10.1.2.3"])
        destinations.know_own(["not-one", "::ffff:10.1.2.4"])
        assert {
            ipaddress.ip_address(a) for a in ("fe80::1", "10.1.2.3", "10.1.2.4")
        } == destinations.own

    def test_what_is_no_address_is_refused_quoted_and_cut(self):
        with pytest.raises(BadInput) as refused:
            Destinations(Settings()).address("orders-" + "x" * 100, client=True)
        assert (
            "ipAddr",
            f"{('orders-' + 'x' * 57)!r} is not an address: a checked instance is checked there",
        ) == (refused.value.field, refused.value.detail)

    @pytest.mark.parametrize(
        ("address", "client", "refused", "detail"),
        [
            (
                "10.0.0.5",
                True,
                OutsideNetworks,
                "10.0.0.5 is not a public address, nor in checks.networks (the networks "
                "instances live in, which the operator lists): not checked from the registry",
            ),
            (
                "::ffff:169.254.169.254",
                False,
                BadInput,
                "::ffff:169.254.169.254 is a cloud metadata address: not checked from the registry",
            ),
            (
                "::1",
                True,
                BadInput,
                "::1 is a loopback or link-local address (checks.loopback allows them): "
                "not checked from the registry",
            ),
            (
                "10.1.2.3",
                False,
                BadInput,
                "10.1.2.3 is an address of this registry node: not checked from the registry",
            ),
            (
                "240.0.0.1",
                False,
                BadInput,
                "240.0.0.1 is a reserved address: not checked from the registry",
            ),
            (
                "224.0.0.1",
                False,
                BadInput,
                "224.0.0.1 is a multicast or broadcast address: not checked from the registry",
            ),
            (
                "::",
                False,
                BadInput,
                ":: is an unspecified address (0.0.0.0/8, ::): not checked from the registry",
            ),
        ],
    )
    def test_each_refusal_in_full(self, address, client, refused, detail):
        """What the client reads in the 400 (or the registration's header, when outside the
        networks: that one alone registers the instance unchecked)."""
        with pytest.raises(BadInput) as raised:
            Destinations(Settings(), own=["10.1.2.3"]).address(address, client=client)
        assert (refused, "ipAddr", detail) == (
            type(raised.value),
            raised.value.field,
            raised.value.detail,
        )

    @pytest.mark.parametrize(
        ("written", "checked"),
        [
            ("8.8.4.4", "8.8.4.4"),
            ("::ffff:8.8.4.4", "8.8.4.4"),
            ("2002:808:404::1", "8.8.4.4"),  # 6to4
            ("2001:0:4136:e378:8000:63bf:f7f7:fbfb", "8.8.4.4"),  # Teredo, its client
            ("64:ff9b::808:404", "8.8.4.4"),  # NAT64
            ("2001:4860:4860::8888", "2001:4860:4860::8888"),
        ],
    )
    def test_an_ipv4_address_in_ipv6_is_checked_as_itself(self, written, checked):
        assert checked == Destinations(Settings()).address(written, client=True)
        assert ipaddress.ip_address(checked) == unwrapped(ipaddress.ip_address(written))


class TestHostHeader:
    @pytest.mark.parametrize("name", ["orders.example.com", "api.shop.co.uk", "a.b.io."])
    def test_a_public_name_is_sent(self, name):
        assert public_name(name)

    @pytest.mark.parametrize(
        "name",
        [
            "localhost",
            "orders",
            "metadata.google.internal",
            "printer.local",
            "db.svc.cluster.local",
            "x.localhost",
            "10.0.0.5",
            "fd00::1",
            "under_score.example.com",
            "host.lan",
        ],
    )
    def test_another_name_is_not(self, name):
        assert not public_name(name)

    def test_localhost_is_sent_as_the_address_checked(self):
        doc = instance_doc(
            "ORDERS",
            "i-1",
            ipAddr="8.8.4.4",
            hostName="localhost",
            port={"$": 8080, "@enabled": "true"},
            healthCheckUrl="http://localhost:8080/admin?x=1",
            metadata={"registry.check": "http", "registry.check.interval": "1"},
        )
        instance = instance_from_wire(doc, now_ms=0, expected_app="ORDERS")
        spec = check_spec(instance, Destinations(Settings()), Settings())
        assert spec is not None
        assert ("8.8.4.4", "8.8.4.4", "/admin?x=1") == (spec.address, spec.host, spec.target)
        assert 5.0 == spec.interval  # a client's 1 s raised to checks.min_interval


class TestPacing:
    def test_the_nodes_bucket_starts_with_one_token(self):
        bucket = node_bucket(1000.0, now=0.0)
        taken = 0
        while not bucket.wait(0.0):
            taken += 1
        assert 1 == taken
        # A second later: a second's checks and the hundredth of one it may hold, no more.
        started = sum(1 for i in range(2000) if not bucket.wait(i / 2000)) + taken
        assert started <= 1000 + 10 + 1

    def test_one_address_gets_turns_spaced_by_its_rate(self):
        slots = AddressSlots(10.0)
        turns = [slots.take("10.0.0.5", 0.0, before=0.95) for _ in range(12)]
        assert [i / 10 for i in range(10)] == pytest.approx(turns[:10])
        assert [None, None] == turns[10:]  # no turn before the next check is due
        assert 0.0 == slots.take("10.0.0.6", 0.0, before=1.0)  # another address: its own


class TestQuota:
    def test_a_credential_has_so_many_instances_checked(self):
        quota = CheckQuota(per_credential=2)
        for iid in ("i-1", "i-2"):
            quota.admit("alice", iid)
            quota.asked("alice", iid)
        quota.admit("alice", "i-1")  # registering again is no new one
        with pytest.raises(LimitReached, match=r"checks\.max_per_credential"):
            quota.admit("alice", "i-3")
        quota.admit("bob", "i-3")
        quota.forget("i-2")
        quota.admit("alice", "i-3")
        assert (1, 1) == (quota.held_by("alice"), quota.refused)


class TestClientsOff:
    def test_a_clients_check_is_refused_naming_the_field(self):
        doc = instance_doc("ORDERS", "i-1", ipAddr="8.8.4.4", metadata={"registry.check": "tcp"})
        instance = instance_from_wire(doc, now_ms=0, expected_app="ORDERS")
        off = Settings.of(checks__clients=False)
        with pytest.raises(BadInput) as refused:
            check_spec(instance, Destinations(off), off)
        assert "metadata.registry.check" == refused.value.field
        # An admin's instance (the registry holds its lease) is checked all the same.
        held = {"registry.check": "tcp", "registry.lease": "server"}
        doc = instance_doc("ORDERS", "i-2", ipAddr="10.0.0.9", metadata=held)
        instance = instance_from_wire(doc, now_ms=0, expected_app="ORDERS")
        assert check_spec(instance, Destinations(off), off) is not None
