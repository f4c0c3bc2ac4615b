"""Admins' checks on applications in the core: the later decision wins on every node whatever
order they hear them in, a removal is remembered against older copies, the registry tells its
subscribers and the peers, and a removal releases the holds nothing else would release."""

from __future__ import annotations

import itertools
from typing import Any

from registry.core.app_checks import AppCheck, AppChecks
from registry.core.model import InstanceStatus, ReplicationAction
from registry.core.registry import Registry
from registry.core.subscriber import Subscriber
from tests.factories import T0, make

S = InstanceStatus


def check(set_ms: int, kind: str = "http", **fields: Any) -> AppCheck:
    values = {"interval": 10.0, "timeout": 2.0, "path": None, "by": "ops", **fields}
    return AppCheck("ORDERS", kind, set_ms=set_ms, **values)


class Told(Subscriber):
    def __init__(self) -> None:
        self.app_checks: list[tuple[str, AppCheck | None]] = []
        self.replicated: list[tuple[Any, ...]] = []

    def on_app_check(self, app: str, check: AppCheck | None) -> None:
        self.app_checks.append((app, check))

    def on_replicate(self, action: ReplicationAction, app: str, iid: str, *rest: Any) -> None:
        self.replicated.append((action, app, iid))


def test_the_later_decision_wins_in_any_order():
    decisions: list[tuple[str, Any]] = [
        ("set", check(100)),
        ("set", check(300, "tcp")),
        ("removed", 200),
        ("set", check(300, "http", path="/health")),  # same time: the greater, everywhere
        ("removed", 300),  # same time as a set: the set
    ]
    outcomes = set()
    for order in itertools.permutations(decisions):
        checks = AppChecks()
        for kind, decision in order:
            if kind == "set":
                checks.take(decision)
            else:
                checks.take_removal("ORDERS", decision)
        outcomes.add((checks.get("ORDERS"), checks.removed_at("ORDERS")))
    assert {(check(300, "tcp"), None)} == outcomes


def test_a_removal_outlives_the_check_it_removed():
    checks = AppChecks()
    assert checks.take(check(100))
    assert checks.take_removal("ORDERS", 200)
    assert not checks.take(check(150))  # a partitioned node's older copy
    assert "ORDERS" not in checks
    assert [("ORDERS", 200)] == checks.removals()
    assert checks.take(check(250))  # set again later
    assert [] == checks.removals()


def test_the_registry_tells_its_subscribers_and_the_peers_of_an_admins_call():
    registry, told = Registry(), Told()
    registry.subscribe(told)
    assert registry.set_app_check(check(T0), now_ms=T0)
    assert not registry.set_app_check(check(T0), now_ms=T0)  # no news here; the peers hear it again
    assert not registry.set_app_check(
        check(T0 - 1), now_ms=T0, is_replication=True
    )  # older: ignored
    assert [("ORDERS", check(T0))] == told.app_checks
    assert [(ReplicationAction.APP_CHECK, "ORDERS", "")] * 2 == told.replicated
    assert registry.remove_app_check("ORDERS", at_ms=T0 + 1, now_ms=T0 + 1, is_replication=True)
    assert ("ORDERS", None) == told.app_checks[-1]
    assert 2 == len(told.replicated)  # a peer's removal is not sent back


def test_an_application_check_makes_its_instances_ask_for_a_check():
    registry = Registry()
    registry.register(make("i-1"), now_ms=T0)
    instance = registry.get("ORDERS", "i-1", now_ms=T0).instance
    assert not registry.asks_check(instance)
    registry.set_app_check(check(T0), now_ms=T0)
    assert registry.asks_check(instance)


def test_a_removal_releases_the_holds_of_instances_that_ask_for_no_check_of_their_own():
    """Nothing would check them any more, so nothing would release them."""
    registry = Registry()
    registry.set_app_check(check(T0), now_ms=T0)
    registry.register(make("i-1"), now_ms=T0)
    registry.register(make("i-2", metadata={"registry.check": "tcp"}), now_ms=T0)
    for iid in ("i-1", "i-2"):
        registry.check_failed("ORDERS", iid, "HTTP 503", now_ms=T0 + 1)
    registry.remove_app_check("ORDERS", at_ms=T0 + 2, now_ms=T0 + 2)
    statuses = {
        iid: registry.get("ORDERS", iid, now_ms=T0 + 2).instance.status for iid in ("i-1", "i-2")
    }
    assert {"i-1": S.UP, "i-2": S.DOWN} == statuses  # i-2's own check goes on: it decides
    assert "i-1" not in registry.checks


def test_an_admins_new_call_is_the_latest_decision_even_in_the_same_millisecond():
    checks = AppChecks()
    checks.take(check(T0, "tcp"))
    assert checks.take_removal("ORDERS", checks.next_ms("ORDERS", T0))
    assert checks.take(check(checks.next_ms("ORDERS", T0 - 5), "http"))  # a clock stepped back
    assert "http" == checks.get("ORDERS").kind


def test_a_removal_releases_a_hold_on_an_instance_whose_lease_ran_out():
    """Not evicted yet (self-preservation, or between sweeps): its next heartbeat must not
    bring it back held, with nothing left to release it."""
    registry = Registry()
    registry.set_app_check(check(T0), now_ms=T0)
    registry.register(make("i-1"), now_ms=T0)
    registry.check_failed("ORDERS", "i-1", "HTTP 503", now_ms=T0 + 1)
    later = T0 + 10 * 90_000
    registry.remove_app_check("ORDERS", at_ms=later, now_ms=later)
    assert "i-1" not in registry.checks
    registry.renew("ORDERS", "i-1", later, False, None, S.UNKNOWN)
    assert S.UP is registry.get("ORDERS", "i-1", now_ms=later).instance.status


def test_a_peers_decision_from_beyond_the_clock_skew_is_not_taken():
    """It would outrank every later call, forever."""
    registry = Registry(max_clock_skew_ms=300_000)
    ahead = T0 + 3_600_000
    assert not registry.set_app_check(check(ahead), now_ms=T0, is_replication=True)
    assert not registry.remove_app_check("ORDERS", at_ms=ahead, now_ms=T0, is_replication=True)
    assert "ORDERS" not in registry.app_checks and registry.app_checks.removed_at("ORDERS") is None
