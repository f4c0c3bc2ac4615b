"""The fetch limiter's buckets: per client, refilled at the rate, bounded in memory."""

from __future__ import annotations

import pytest

from registry.http.ratelimit import FetchLimiter, client_key, retry_after


def test_each_client_has_its_own_bucket():
    limiter = FetchLimiter(rate=1, burst=2)
    assert [0, 0] == [limiter.wait("a", 0.0), limiter.wait("a", 0.0)]
    assert 1.0 == limiter.wait("a", 0.0)
    assert 0 == limiter.wait("b", 0.0)
    assert 0.5 == limiter.wait("a", 0.5)
    assert 0 == limiter.wait("a", 1.0)
    assert 2 == limiter.throttled


def test_an_idle_client_refills_only_to_the_burst():
    limiter = FetchLimiter(rate=10, burst=3)
    limiter.wait("a", 0.0)
    waits = [limiter.wait("a", 1000.0) for _ in range(4)]
    assert [0, 0, 0] == waits[:3] and waits[3] > 0


def test_memory_is_bounded_by_forgetting_the_least_recently_seen():
    limiter = FetchLimiter(rate=1, burst=1, max_clients=3)
    for key in ("a", "b", "c"):
        limiter.wait(key, 0.0)
    limiter.wait("a", 0.1)  # a is seen again: b is now the oldest
    limiter.wait("d", 0.2)
    assert 3 == len(limiter)
    assert 0 == limiter.wait("b", 0.3)  # forgotten, so back with a full bucket
    assert limiter.wait("a", 0.3) > 0


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("10.0.0.5", "10.0.0.5"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        (None, "unknown"),
    ],
)
def test_an_ipv6_host_is_one_client_across_its_64(address, key):
    assert key == client_key(address)


def test_retry_after_rounds_up_to_whole_seconds():
    assert ["1", "1", "2"] == [retry_after(w) for w in (0.01, 1.0, 1.2)]


def test_an_ipv4_client_on_a_dual_stack_socket_keeps_its_own_bucket():
    assert "10.0.0.5" == client_key("::ffff:10.0.0.5")
