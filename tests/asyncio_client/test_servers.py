"""The servers a client talks to: parsing the list, failing over, resting and going back."""

from __future__ import annotations

import base64
import random
from urllib.parse import urlsplit

import pytest

from registry.client.servers import MAX_REST, Server, ServerList, parse_servers

THREE = "http://a:8761/eureka/,http://b:8761/eureka/,http://c:8761/eureka/"


def _servers(urls: str = THREE, *, seed: int = 0, return_after: float = 300.0) -> ServerList:
    return ServerList(parse_servers(urls), return_after=return_after, rng=random.Random(seed))


def _basic(credential: bytes) -> str:
    """The HTTP Basic `Authorization` value for `user:password`."""
    return "Basic " + base64.b64encode(credential).decode()


def _host(server: Server) -> str | None:
    """The server's host: `a`, `b` or `c`."""
    return urlsplit(server.url).hostname


class TestParseServers:
    def test_comma_list(self):
        """A comma list gives one server per URL, in order, spaces and empty parts ignored."""
        servers = parse_servers(" http://a:8761/eureka/ , ,https://b/eureka/,")
        assert ["http://a:8761/eureka/", "https://b/eureka/"] == [s.url for s in servers]

    def test_credentials_are_taken_out_of_the_url(self):
        """User and password move out of the URL into an HTTP Basic authorization."""
        [server] = parse_servers("http://user:secret@a:8761/eureka/")
        expected = ("http://a:8761/eureka/", _basic(b"user:secret"))
        assert expected == (server.url, server.authorization)

    def test_percent_encoded_credentials_are_decoded(self):
        """A percent-encoded user and password are decoded before they are presented."""
        [server] = parse_servers("http://us%40er:p%3As%2Fw%25@a/eureka/")
        expected = ("http://a/eureka/", _basic(b"us@er:p:s/w%"))
        assert expected == (server.url, server.authorization)

    def test_user_without_password(self):
        """A user without a password presents an empty password."""
        assert _basic(b"user:") == parse_servers("http://user@a/eureka/")[0].authorization

    def test_no_credentials(self):
        """A URL without a user gives no authorization."""
        assert None is parse_servers("http://a/eureka/")[0].authorization

    def test_credentials_stay_out_of_repr(self):
        """A server's repr shows neither its password nor its authorization."""
        server = parse_servers("http://user:secret@a/eureka/")[0]
        assert (False, False) == ("secret" in repr(server), "Basic" in repr(server))

    @pytest.mark.parametrize(
        ("given", "expected"),
        [
            ("http://a:8761/eureka", "http://a:8761/eureka/"),
            ("http://a:8761", "http://a:8761/"),
            ("http://a:8761/eureka/", "http://a:8761/eureka/"),
        ],
    )
    def test_trailing_slash_is_added(self, given: str, expected: str):
        """The base URL always ends in a slash, so relative paths resolve under it."""
        assert expected == parse_servers(given)[0].url

    def test_ipv6_host_keeps_its_brackets(self):
        """An IPv6 host stays in brackets, with its port and without credentials."""
        [server] = parse_servers("http://user:pw@[::1]:8761/eureka")
        expected = ("http://[::1]:8761/eureka/", _basic(b"user:pw"))
        assert expected == (server.url, server.authorization)

    def test_percent_encoded_path_is_kept(self):
        """A path that is already percent-encoded is not encoded again."""
        assert "http://a/my%20eureka/" == parse_servers("http://a/my%20eureka/")[0].url

    @pytest.mark.parametrize("urls", ["ftp://a/eureka/", "a:8761/eureka/", "http:///eureka/"])
    def test_non_http_url_is_refused_by_name(self, urls: str):
        """A URL that is not http(s) with a host is refused, naming it."""
        with pytest.raises(ValueError, match=urls):
            parse_servers(f"http://ok/eureka/,{urls}")

    @pytest.mark.parametrize("urls", ["", " ", " , ,"])
    def test_empty_list_is_refused(self, urls: str):
        """A list without any URL is refused."""
        with pytest.raises(ValueError, match="no server URL"):
            parse_servers(urls)


class TestFailed:
    def test_first_server_is_current_and_sticks(self):
        """The first server is current to begin with and stays so while nothing fails."""
        servers = _servers()
        assert ["a", "a", "a"] == [_host(servers.choose(t)) for t in (0.0, 100.0, 1000.0)]

    def test_current_failing_moves_to_the_next(self):
        """A failing current server hands over to the next one, which becomes current."""
        servers = _servers()
        successor = servers.failed(servers.current, 0.0)
        assert (servers.servers[1], "b") == (successor, _host(servers.current))

    def test_resting_server_is_skipped(self):
        """A failover passes over a server that is resting."""
        servers = _servers()
        assert None is servers.failed(servers.servers[1], 0.0)
        assert servers.servers[2] is servers.failed(servers.current, 0.1)
        assert "c" == _host(servers.current)

    def test_failover_wraps_around_the_list(self):
        """The last server fails over to the first when that one has rested."""
        servers = _servers()
        servers.failed(servers.servers[0], 0.0)
        servers.failed(servers.servers[1], 10.0)
        assert servers.servers[0] is servers.failed(servers.servers[2], 20.0)

    def test_failing_server_that_is_not_current_changes_nothing(self):
        """A failure of a server that is not current leaves the current one, but rests it."""
        servers = _servers()
        assert None is servers.failed(servers.servers[2], 0.0)
        assert ("a", True) == (_host(servers.current), servers.servers[2].resting(0.0))

    def test_stays_when_all_others_rest(self):
        """When every other server rests, the current one stays."""
        servers = _servers()
        servers.failed(servers.servers[1], 0.0)
        servers.failed(servers.servers[2], 0.0)
        assert None is servers.failed(servers.current, 0.1)
        assert "a" == _host(servers.current)

    def test_single_server_stays(self):
        """A lone server has nowhere to hand over to."""
        servers = _servers("http://a/eureka/")
        assert None is servers.failed(servers.current, 0.0)
        assert servers.servers[0] is servers.current


class TestRest:
    def test_rests_double_with_jitter(self):
        """Each failure rests a server for 1, 2, 4 ... seconds capped at MAX_REST, times a
        jitter drawn from [0.5, 1.0]."""
        servers = _servers(seed=7)
        jitter = random.Random(7)
        first = servers.servers[0]
        rests, expected = [], []
        for failures in range(1, 11):
            servers.failed(first, 0.0)
            rests.append(first.rests_until)
            expected.append(min(MAX_REST, 2.0 ** (failures - 1)) * jitter.uniform(0.5, 1.0))
        assert expected == rests

    @pytest.mark.parametrize("seed", range(20))
    def test_rests_stay_within_their_bounds(self, seed: int):
        """Every rest lies within half and all of its nominal length."""
        servers = _servers(seed=seed)
        first = servers.servers[0]
        for failures in range(1, 12):
            servers.failed(first, 100.0)
            nominal = min(MAX_REST, 2.0 ** (failures - 1))
            assert 0.5 * nominal <= first.rests_until - 100.0 <= nominal

    def test_jitter_differs_between_clients(self):
        """Two clients with different random sources rest a failed server differently."""
        rests = set()
        for seed in range(5):
            servers = _servers(seed=seed)
            servers.failed(servers.current, 0.0)
            rests.add(servers.servers[0].rests_until)
        assert 5 == len(rests)

    def test_resting_ends_when_the_rest_is_over(self):
        """A server rests until its rest ends, and not after."""
        servers = _servers()
        first = servers.servers[0]
        servers.failed(first, 10.0)
        assert (True, False) == (first.resting(10.0), first.resting(first.rests_until))

    def test_success_clears_the_rest_and_the_count(self):
        """A success ends the rest and starts the doubling over."""
        servers = _servers()
        first = servers.servers[0]
        for _ in range(6):
            servers.failed(first, 0.0)
        servers.succeeded(first)
        assert (0, False) == (first.failures, first.resting(0.0))
        servers.failed(first, 0.0)
        assert first.rests_until <= 1.0


class TestChoose:
    def test_stays_on_the_next_before_return_after(self):
        """The client stays on the server it went over to until `return_after` has passed."""
        servers = _servers(return_after=300.0)
        servers.failed(servers.current, 0.0)
        assert ["b", "b"] == [_host(servers.choose(t)) for t in (10.0, 299.9)]

    def test_goes_back_to_the_first_after_return_after(self):
        """Once `return_after` has passed since leaving it, the first server is chosen."""
        servers = _servers(return_after=300.0)
        servers.failed(servers.current, 0.0)
        assert (servers.servers[0], "a") == (servers.choose(300.0), _host(servers.current))

    def test_does_not_go_back_while_the_first_rests(self):
        """The first server is not chosen again while it rests, however long ago it was left."""
        servers = _servers(return_after=0.1)
        first = servers.servers[0]
        servers.failed(first, 0.0)
        assert first.resting(0.2)
        assert "b" == _host(servers.choose(0.2))
        assert "a" == _host(servers.choose(first.rests_until))

    def test_return_after_counts_from_leaving_the_first(self):
        """A later failover between other servers does not restart the wait for the first."""
        servers = _servers(return_after=300.0)
        servers.failed(servers.servers[0], 0.0)
        servers.failed(servers.servers[1], 200.0)
        assert ["c", "a"] == [_host(servers.choose(t)) for t in (299.0, 300.0)]
