"""Self-preservation's arithmetic under random histories (hypothesis): registrations, renewals
at random cadences, silences, cancels, evictions, window counts and recounts.

What must hold whatever happens:

- no lease weighs more than it claims, nor more than it delivered: some stretch of its own
  renewals, ending at its last, sent at least its weight per window over at least a window;
- silence never lowers a lease's weight, counted or not;
- an eviction never lowers the expectation or the threshold (one not counted yet raises them
  until the next count); only a recount lowers them;
- the expectation is what the leases weigh, and what was evicted since the last recount.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.core.model import Lease
from registry.core.preservation import SelfPreservation, weight
from registry.core.registry import Registry
from tests.factories import T0, make

W = 60_000
IDS = [f"i-{n}" for n in range(6)]
INTERVALS = [1, 2, 5, 30, 90]  # seconds a client says it renews every

ops = st.one_of(
    st.tuples(st.just("register"), st.sampled_from(IDS), st.sampled_from(INTERVALS)),
    st.tuples(st.just("renew"), st.sampled_from(IDS)),
    st.tuples(st.just("burst"), st.sampled_from(IDS), st.integers(2, 40)),
    st.tuples(st.just("advance"), st.integers(1, 200_000)),
    st.tuples(st.just("cancel"), st.sampled_from(IDS)),
    st.tuples(st.just("evict"), st.sampled_from(IDS)),
    st.tuples(st.just("window")),
    st.tuples(st.just("recount")),
)


def delivered_enough(registered: int, times: list[int], w: float) -> bool:
    """Whether some stretch ending at the last renewal `times` holds, from the registration or
    from a renewal, sent `w` a window or more, over at least a window. (Registrations again
    only lengthen what the registry measures.)"""
    last = times[-1]
    stretches = [(len(times), registered)] + [(len(times) - 1 - j, t) for j, t in enumerate(times)]
    return any(sent * W / max(W, last - start) >= w - 1e-9 for sent, start in stretches)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=120))
def test_the_arithmetic_holds_whatever_the_history(history):
    registry = Registry()
    sp = SelfPreservation(window=W / 1000, recount_interval=300, min_instances=0)
    now = T0
    renewals: dict[str, list[int]] = {}  # by lease: its renewals here, in order
    registered: dict[str, int] = {}  # by lease: when it registered
    renewed: set[str] = set()  # leases renewed since the last window's count

    def lease(iid: str) -> Lease | None:
        return next((x for x in registry.leases() if x.instance.instance_id == iid), None)

    def renew(iid: str) -> None:
        registry.renew("ORDERS", iid, now)
        renewals[iid].append(now)
        renewed.add(iid)

    for op in history:
        kind = op[0]
        held = lease(op[1]) if len(op) > 1 and isinstance(op[1], str) else None
        if kind == "register":  # or again, which is no renewal
            instance = make(op[1], renewal_interval_secs=op[2], duration_secs=3 * op[2])
            registry.register(instance, now_ms=now)
            if held is None:
                renewals[op[1]], registered[op[1]] = [], now
            renewed.add(op[1])
        elif kind == "renew" and held is not None:
            renew(op[1])
        elif kind == "burst" and held is not None:
            for _ in range(op[2]):
                now += 5
                renew(op[1])
        elif kind == "advance":
            before = {x.instance.instance_id: weight(x, W) for x in registry.leases()}
            now += op[1]
            assert before == {x.instance.instance_id: weight(x, W) for x in registry.leases()}
        elif kind == "cancel" and held is not None:
            registry.cancel("ORDERS", op[1], now_ms=now)
        elif kind == "evict" and held is not None and held.is_expired(now):
            expected, threshold = sp.expected_per_minute(), sp.threshold()
            sp.evicted(weight(held, W))
            assert registry.evict("ORDERS", op[1], now_ms=now)
            assert sp.expected_per_minute() >= expected - 1e-9
            assert sp.threshold() >= threshold
        elif kind == "window":
            silent = {
                x.instance.instance_id: weight(x, W)
                for x in registry.leases()
                if x.instance.instance_id not in renewed
            }
            renewed.clear()
            departed = sp.departed
            counted = sp.tally()
            for x in registry.leases():
                counted.add(x)
            sp.end_window(counted)
            weights = {x.instance.instance_id: weight(x, W) for x in registry.leases()}
            assert all(weights[iid] == w for iid, w in silent.items())
            assert pytest.approx(sum(weights.values()) + departed) == sp.expected_per_minute()
        elif kind == "recount":
            sp.recount()
        for x in registry.leases():
            w = weight(x, W)
            claim = W / (x.instance.renewal_interval_secs * 1000)
            assert w <= claim + 1e-9
            if w:
                iid = x.instance.instance_id
                assert delivered_enough(registered[iid], renewals[iid], w)
