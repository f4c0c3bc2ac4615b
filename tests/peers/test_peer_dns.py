"""Peers from DNS in one process: lookups against a DNS server on loopback (A, AAAA, SRV, a
name that does not exist, a server that does not answer), the membership's grace, and a node
that finds itself among the addresses and skips it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from structlog.testing import capture_logs

from peers.cluster import Cluster
from peers.membership import DnsLookups, Membership
from peers.peer_addresses import Screen
from peers.peer_dns import LookupFailed, PeerDns, refresh
from registry import FakeClock, Settings, create_app
from registry.appkeys import CLUSTER, LIFECYCLE
from registry.core.registry import Registry
from registry.lifecycle import Phase
from registry.settings import SettingsError, load_settings
from tests.dns_server import StubDns
from tests.helpers import JSON, fetch_json
from tests.peers.apps import AiohttpClient

NAME = "registry-peers.test"


@pytest.fixture
async def stub() -> AsyncIterator[StubDns]:
    server = await StubDns().start()
    yield server
    server.close()


def dns_settings(stub: StubDns, **more: object) -> Settings:
    values: dict[str, object] = {
        "peers__dns_name": NAME,
        "peers__dns_nameservers": [stub.server],
        "peers__dns_interval": 0.5,  # a lookup gives up after this long (at most 5 s)
        **more,
    }
    return load_settings(None, {}, **values).settings


class TestLookup:
    async def test_each_address_is_a_peer_at_the_port_and_path(self, stub: StubDns):
        stub.set(NAME, ["10.0.0.7", "10.0.0.5"])
        urls = (
            await PeerDns(dns_settings(stub, peers__dns_port=9000, peers__dns_path="/r/")).lookup()
        ).urls
        assert ["http://10.0.0.5:9000/r/", "http://10.0.0.7:9000/r/"] == urls

    async def test_ipv6_only_when_the_name_has_no_ipv4(self, stub: StubDns):
        """A dual-stack peer is one peer, by its IPv4 address; an IPv6-only one, bracketed."""
        stub.set(NAME, ["10.0.0.5", "fd00::5"])
        assert ["http://10.0.0.5:8761/eureka/"] == (await PeerDns(dns_settings(stub)).lookup()).urls
        stub.set(NAME, ["fd00::5"])
        assert ["http://[fd00::5]:8761/eureka/"] == (
            await PeerDns(dns_settings(stub)).lookup()
        ).urls

    async def test_srv_records_give_targets_and_ports(self, stub: StubDns):
        stub.set_srv(NAME, [("a.test", 8001), ("b.test", 8002)])
        stub.set("a.test", ["10.0.0.1"])
        stub.set("b.test", ["10.0.0.2"])
        urls = (await PeerDns(dns_settings(stub, peers__dns_port=1)).lookup()).urls
        assert ["http://10.0.0.1:8001/eureka/", "http://10.0.0.2:8002/eureka/"] == urls

    async def test_a_gone_srv_target_is_no_peer_and_no_failure(self, stub: StubDns):
        """A pod deleted between the SRV answer and its address's (routine in a roll) is
        left out; the others are peers; the root target ("no such service") is none."""
        stub.set_srv(NAME, [("a.test", 8761), ("gone.test", 8761), (".", 8761)])
        stub.set("a.test", ["10.0.0.1"])
        assert ["http://10.0.0.1:8761/eureka/"] == (await PeerDns(dns_settings(stub)).lookup()).urls

    async def test_a_target_with_several_ports_is_one_peer(self, stub: StubDns):
        """A Service with a metrics port beside the API lists each pod twice: the port that
        is peer_dns_port is taken."""
        stub.set_srv(NAME, [("a.test", 9100), ("a.test", 8761)])
        stub.set("a.test", ["10.0.0.1"])
        assert ["http://10.0.0.1:8761/eureka/"] == (await PeerDns(dns_settings(stub)).lookup()).urls

    async def test_a_name_without_addresses_names_no_peer(self, stub: StubDns):
        """The name exists, with no address (every other node gone): no peers, no failure."""
        stub.set(NAME, [])
        assert [] == (await PeerDns(dns_settings(stub)).lookup()).urls

    async def test_a_name_that_does_not_exist_fails(self, stub: StubDns):
        """NXDOMAIN is a failure (a misspelt name must not look like an empty cluster)."""
        with pytest.raises(LookupFailed, match="does not exist"):
            await PeerDns(dns_settings(stub)).lookup()

    async def test_a_server_that_does_not_answer_fails_in_time(self, stub: StubDns):
        stub.set(NAME, ["10.0.0.5"])
        stub.answering = False
        with pytest.raises(LookupFailed, match=NAME):
            await PeerDns(dns_settings(stub, peers__dns_interval=0.2)).lookup()
        assert stub.queries >= 1


class TestAddressesNoPeerCanHave:
    @pytest.mark.parametrize(
        ("address", "why"),
        [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),  # "this network"
            ("::", "unspecified"),
            ("192.0.2.10", "unspecified"),  # documentation ranges: no machine has them
            ("2001:db8::1", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "reserved"),
            ("169.254.169.254", "metadata"),
            ("::ffff:169.254.169.254", "metadata"),  # mapped: judged as the IPv4 address
            ("fd00:ec2::254", "metadata"),
            ("169.254.10.10", "link-local"),
            ("fe80::1", "link-local"),
            ("127.0.0.3", "loopback"),
            ("::ffff:127.0.0.3", "loopback"),
            ("::1", "loopback"),
            ("10.0.0.5", None),
            ("fd00::5", None),
            ("100.64.0.1", None),  # carrier-grade NAT: pods of some clusters have these
        ],
    )
    def test_a_node_on_a_routable_address(self, address: str, why: str | None):
        assert why == Screen.for_host("10.0.0.1").refusal(address)

    def test_loopback_only_for_a_node_on_loopback(self):
        """Nodes of one machine (as tests run them) are peers on loopback; a node on every
        address (a pod) has none there."""
        assert None is Screen.for_host("127.0.0.2").refusal("127.0.0.3")
        assert None is Screen.for_host("localhost").refusal("::1")
        assert "loopback" == Screen.for_host("0.0.0.0").refusal("127.0.0.3")

    def test_link_local_only_for_a_node_on_link_local(self):
        assert None is Screen.for_host("169.254.0.5").refusal("169.254.0.6")
        assert "metadata" == Screen.for_host("169.254.0.5").refusal("169.254.169.254")

    async def test_an_answer_is_screened_and_counted(self, stub: StubDns):
        """Of an answer naming loopback, link-local, multicast and routable addresses, a node
        on a routable address takes the routable ones only, in address order, and counts
        the others by why."""
        stub.set(NAME, ["127.0.0.3", "169.254.169.254", "169.254.3.3", "224.0.0.9", "10.0.0.10"])
        stub.addresses[NAME] += ["10.0.0.9", "0.0.0.0"]
        answer = await PeerDns(
            dns_settings(stub, server__host="10.0.0.1", server__insecure_public_bind=True)
        ).lookup()
        assert ["http://10.0.0.9:8761/eureka/", "http://10.0.0.10:8761/eureka/"] == answer.urls
        assert {
            "loopback": 1,
            "metadata": 1,
            "link-local": 1,
            "multicast": 1,
            "unspecified": 1,
        } == answer.refused


class TestCap:
    async def test_at_most_the_cap_the_first_by_address_said_once(
        self, stub: StubDns, aiohttp_client: AiohttpClient
    ):
        """An answer of 40 peers makes 16 (the first by address, this node's own left out);
        the rest, and the address refused, are counted in GET status and /metrics and logged
        once, not at every lookup; an answer within the cap ends the series."""
        stub.set(NAME, ["127.0.0.1", "224.0.0.9", *(f"127.0.1.{n}" for n in range(40, 0, -1))])
        settings = dns_settings(
            stub, store__enabled=False, peers__dns_interval=60, peers__sync_budget=1
        )
        with capture_logs() as logs:
            client = await aiohttp_client(create_app(settings))
            cluster = client.app[CLUSTER]  # type: ignore[index]
            peer_dns = PeerDns(settings)
            await refresh(peer_dns, cluster)  # the start-up's lookup, and this one: one warning
            wanted = [f"http://127.0.1.{n}:8761/eureka/" for n in range(1, 17)]
            assert wanted == list(cluster.dispatchers)
            dns = (await fetch_json(client, "/eureka/status"))["membership"]["dns"]
            assert (wanted, 24, 16, {"multicast": 1}) == (
                dns["found"],
                dns["dropped"],
                dns["maxPeers"],
                dns["refused"],
            )
            metrics = await (await client.get("/metrics")).text()
            assert "registry_peer_dns_dropped 24.0" in metrics
            assert 'registry_peer_dns_refused{reason="multicast"} 1.0' in metrics
            assert "registry_peers 16.0" in metrics
            page = await (await client.get("/")).text()
            assert "24 beyond peers.dns_max_peers (16)" in page
            stub.set(NAME, ["127.0.1.1"])
            await refresh(peer_dns, cluster)
            stub.set(NAME, [f"127.0.1.{n}" for n in range(1, 20)])
            await refresh(peer_dns, cluster)
        assert 1 == len([e for e in logs if e["event"] == "peer_dns_refused"])
        capped = [e for e in logs if e["event"] == "peer_dns_capped"]
        assert [(40, 16, 24), (19, 16, 3)] == [
            (e["named"], e["kept"], e["dropped"]) for e in capped
        ]

    def test_the_setting(self):
        assert (
            3
            == load_settings(
                None, {"REGISTRY_PEERS__DNS_MAX_PEERS": "3"}
            ).settings.peers.dns_max_peers
        )
        with pytest.raises(SettingsError, match=r"peers.dns_max_peers: Expected int >= 1"):
            load_settings(None, {}, peers__dns_max_peers=0)


class TestSettings:
    @pytest.mark.parametrize(
        ("values", "message"),
        [
            ({"peers__dns_name": "not a name"}, "peers.dns_name: 'not a name' is not a DNS name"),
            ({"peers__dns_nameservers": ["dns.example:53"]}, "not an address:port"),
            ({"peers__dns_nameservers": ["127.0.0.1:0"]}, "invalid port"),
            ({"peers__dns_path": "eureka/"}, "must be a path"),
            ({"peers__dns_path": "/eu reka/"}, "must be a path"),
            ({"peers__dns_interval": 0}, "peers.dns_interval: Expected float > 0"),
            (
                {"peers__dns_name": "peers.test", "credentials__clients": ["c:p"]},
                "credentials.peer",
            ),
        ],
    )
    def test_bad_values_stop_start_up(self, values: dict[str, object], message: str):
        with pytest.raises(SettingsError, match=message):
            load_settings(None, {}, **values)

    def test_the_path_gets_its_trailing_slash(self):
        """As `peers` do: peers' requests are made below it (`{url}apps/`)."""
        assert (
            "/eureka/"
            == load_settings(None, {"REGISTRY_PEERS__DNS_PATH": "/eureka"}).settings.peers.dns_path
        )

    def test_from_the_environment(self):
        settings = load_settings(
            None,
            {
                "REGISTRY_PEERS__DNS_NAME": "registry-peers.default.svc.cluster.local",
                "REGISTRY_PEERS__DNS_NAMESERVERS": "127.0.0.1:5353,[::1]:5353",
                "REGISTRY_PEERS__DNS_INTERVAL": "5",
            },
        ).settings
        assert ("127.0.0.1:5353", "[::1]:5353") == settings.peers.dns_nameservers
        assert 5.0 == settings.peers.dns_interval


class TestMembership:
    def test_a_peer_gone_from_dns_stays_for_the_grace(self):
        membership = Membership(grace=60, dns=DnsLookups(NAME))
        membership.found(["http://a/", "http://b/"], now=0, wall_ms=0)
        membership.found(["http://a/"], now=30, wall_ms=0)
        assert ["http://a/", "http://b/"] == membership.urls()
        assert [{"peer": "http://b/", "secondsLeft": 30.0}] == membership.leaving(now=30)
        membership.found(["http://a/"], now=61, wall_ms=0)
        assert ["http://a/"] == membership.urls()

    def test_a_failed_lookup_keeps_every_peer_however_long(self):
        membership = Membership(grace=1, dns=DnsLookups(NAME))
        membership.found(["http://a/"], now=0, wall_ms=1_000)
        membership.failed("timed out", wall_ms=2_000)
        membership.failed("timed out", wall_ms=3_000)
        assert ["http://a/"] == membership.urls()
        dns = membership.status(now=100)["dns"]
        assert (2_000, 2, "timed out", 1_000) == (
            dns["failingSince"],
            dns["failures"],
            dns["lastError"],
            dns["lastSuccessTimestamp"],
        )
        membership.found(["http://a/"], now=101, wall_ms=4_000)
        assert membership.status(now=101)["dns"]["failingSince"] is None

    def test_static_peers_come_first_and_are_never_leaving(self):
        membership = Membership(grace=1, static=("http://s/",), dns=DnsLookups(NAME))
        membership.found(["http://s/", "http://d/"], now=0, wall_ms=0)
        membership.found([], now=0.5, wall_ms=0)
        assert ["http://s/", "http://d/"] == membership.urls()
        assert [{"peer": "http://d/", "secondsLeft": 0.5}] == membership.leaving(now=0.5)


class TestCluster:
    async def test_a_node_skips_its_own_address(self, stub: StubDns):
        """Bound to 127.0.0.2, the node is the peer DNS names at 127.0.0.2, whatever the
        host names; the others are peers, and the change is remembered."""
        stub.set(NAME, ["127.0.0.2", "127.0.0.3", "127.0.0.4"])
        settings = dns_settings(stub, server__host="127.0.0.2")
        clock = FakeClock()
        cluster = Cluster(Registry(), clock, settings)
        await cluster.start()
        try:
            await refresh(PeerDns(settings), cluster)
            assert ["http://127.0.0.3:8761/eureka/", "http://127.0.0.4:8761/eureka/"] == list(
                cluster.dispatchers
            )
            changes = cluster.membership_status()["changes"]
            assert [("added", "dns")] * 2 == [(c["change"], c["why"]) for c in changes]
            stub.set(NAME, ["127.0.0.2", "127.0.0.3"])
            await clock.advance(settings.peers.dns_grace + 1)
            await refresh(PeerDns(settings), cluster)
            assert ["http://127.0.0.3:8761/eureka/"] == list(cluster.dispatchers)
            assert ("removed", "http://127.0.0.4:8761/eureka/") == (
                cluster.membership_status()["changes"][0]["change"],
                cluster.membership_status()["changes"][0]["peer"],
            )
        finally:
            await cluster.aclose()

    async def test_a_failed_lookup_keeps_the_peers(self, stub: StubDns):
        stub.set(NAME, ["127.0.0.3"])
        settings = dns_settings(stub, server__host="127.0.0.2", peers__dns_interval=0.2)
        cluster = Cluster(Registry(), FakeClock(), settings)
        await cluster.start()
        try:
            await refresh(PeerDns(settings), cluster)
            stub.answering = False
            await refresh(PeerDns(settings), cluster)
            assert ["http://127.0.0.3:8761/eureka/"] == list(cluster.dispatchers)
            assert cluster.membership_status()["dns"]["failingSince"] is not None
        finally:
            await cluster.aclose()

    @pytest.mark.parametrize(
        ("host", "url", "is_self"),
        [
            ("0.0.0.0", "http://127.0.0.9:8761/eureka/", True),  # every address: a local one
            ("0.0.0.0", "http://192.0.2.1:8761/eureka/", False),  # TEST-NET: no machine's
            ("127.0.0.2", "http://127.0.0.3:8761/eureka/", False),  # loopback, but not ours
            ("127.0.0.2", "http://127.0.0.2:8761/eureka/", True),
            ("127.0.0.2", "http://127.0.0.2:8762/eureka/", False),
        ],
    )
    def test_a_node_knows_its_addresses(self, host: str, url: str, is_self: bool):
        settings = Settings.of(server__host=host, server__insecure_public_bind=True)
        assert is_self == Cluster(Registry(), FakeClock(), settings).is_self(url)


class TestShown:
    async def test_membership_in_status_the_page_and_metrics(
        self, stub: StubDns, aiohttp_client: AiohttpClient
    ):
        """GET status (JSON and XML) and the status page say what DNS named and which peers
        came of it; /metrics counts the lookups."""
        stub.set(NAME, ["127.0.0.5"])  # on loopback, where nothing listens
        settings = dns_settings(
            stub, store__enabled=False, peers__dns_interval=60, peers__sync_budget=1
        )
        client = await aiohttp_client(create_app(settings))
        status = await fetch_json(client, "/eureka/status")
        dns = status["membership"]["dns"]
        assert (NAME, ["http://127.0.0.5:8761/eureka/"], None) == (
            dns["name"],
            dns["found"],
            dns["failingSince"],
        )
        assert "127.0.0.1:" in status["membership"]["self"]["listening"]
        [change] = status["membership"]["changes"]
        assert ("added", "http://127.0.0.5:8761/eureka/", "dns") == (
            change["change"],
            change["peer"],
            change["why"],
        )
        xml = await (await client.get("/eureka/status")).text()
        assert "<found><peer>http://127.0.0.5:8761/eureka/</peer></found>" in xml
        page = await (await client.get("/")).text()
        assert "Peers from DNS" in page and "1 peer named" in page
        assert "<td>added</td><td>http://127.0.0.5:8761/eureka/</td><td>dns</td>" in page
        metrics = await (await client.get("/metrics")).text()
        assert 'registry_peer_dns_lookups_total{result="ok"} 1.0' in metrics
        assert "registry_peers 1.0" in metrics


class TestStart:
    async def test_reads_wait_for_dns_that_has_not_answered(
        self, stub: StubDns, aiohttp_client: AiohttpClient, clock: FakeClock
    ):
        """DNS does not answer at start: the node cannot tell whether it has peers to copy, so
        its reads stay closed, saying why, rather than serve an empty registry; once DNS
        answers (here: no peer but this node), they open."""
        stub.set(NAME, ["127.0.0.1"])
        stub.answering = False
        settings = dns_settings(stub, store__enabled=False, peers__dns_interval=0.3)
        client = await aiohttp_client(create_app(settings, clock=clock))
        lifecycle = client.app[LIFECYCLE]  # type: ignore[index]
        assert lifecycle.phase is Phase.SYNCING
        response = await client.get("/eureka/apps", headers=JSON)
        assert 403 == response.status
        assert "peers.dns_name has not answered yet" in (await response.json())["detail"]
        stub.answering = True
        for _ in range(20):  # lookups every 0.3 s of the clock, sync attempts from 0.5 s
            await clock.advance(0.3)
            await asyncio.sleep(0.02)
            if lifecycle.serves_reads:
                break
        assert ("SERVING", "no peers to copy from") == (lifecycle.phase, lifecycle.reason)
