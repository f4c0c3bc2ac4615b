"""A server-side check's verdict in the core: DOWN as the instance's own claim while a check
holds it, the client's own claim again when it passes, an admin's override standing where it
did, and the verdict shown as any status change is (an event, a replicated registration)."""

from __future__ import annotations

from typing import Any

import pytest

from registry.core.model import ActionType, InstanceStatus, ReplicationAction
from registry.core.registry import Registry
from registry.core.subscriber import Subscriber
from tests.factories import T0, make
from tests.recorders import Changes

S = InstanceStatus
CHECKED = {"registry.check": "tcp"}  # what the instance asks for: a check (the core reads the key)


class Replicated(list[tuple[Any, ...]], Subscriber):
    def on_replicate(self, action: ReplicationAction, app: str, iid: str, *rest: Any) -> None:
        self.append((action, app, iid))


@pytest.fixture
def events() -> Changes:
    return Changes()


@pytest.fixture
def replicated() -> Replicated:
    return Replicated()


@pytest.fixture
def registry(events: Changes, replicated: Replicated) -> Registry:
    registry = Registry()
    registry.subscribe(events)
    registry.subscribe(replicated)
    registry.register(make("i-1", metadata=CHECKED), now_ms=T0)
    events.clear()
    replicated.clear()
    return registry


def status_of(registry: Registry) -> S:
    return registry.get("ORDERS", "i-1", now_ms=T0).instance.status


def test_a_failing_check_holds_the_instance_down_until_it_passes(
    registry: Registry, events: Changes, replicated: Replicated
):
    assert registry.check_failed("ORDERS", "i-1", "HTTP 503", now_ms=T0 + 1)
    assert S.DOWN is status_of(registry)
    assert not registry.check_failed("ORDERS", "i-1", "HTTP 500", now_ms=T0 + 2)  # no news
    assert "HTTP 500" == registry.checks.get("i-1").detail
    assert registry.check_passed("ORDERS", "i-1", now_ms=T0 + 3)
    assert S.UP is status_of(registry)
    assert [ActionType.MODIFIED] * 2 == [e.action for e in events]
    assert [S.DOWN, S.UP] == [e.lease.instance.status for e in events]
    assert [(ReplicationAction.REGISTER, "ORDERS", "i-1")] * 2 == replicated
    assert not registry.check_passed("ORDERS", "i-1", now_ms=T0 + 4)  # nothing held


def test_an_override_stands_where_it_did(registry: Registry):
    """Out of service by an admin: a failing check shows DOWN (DownOrStarting believes an
    instance's own DOWN over any override), and its recovery does not put the instance back
    in service: the override decides again."""
    registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0 + 1)
    registry.check_failed("ORDERS", "i-1", "refused", now_ms=T0 + 2)
    assert S.DOWN is status_of(registry)
    registry.check_passed("ORDERS", "i-1", now_ms=T0 + 3)
    assert S.OUT_OF_SERVICE is status_of(registry)


def test_an_override_removed_meanwhile_leaves_the_clients_claim(registry: Registry):
    registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0 + 1)
    registry.renew("ORDERS", "i-1", T0 + 2)  # the chain asked again with the override's status
    registry.check_failed("ORDERS", "i-1", "refused", now_ms=T0 + 3)
    registry.delete_status_override("ORDERS", "i-1", now_ms=T0 + 4)
    registry.check_passed("ORDERS", "i-1", now_ms=T0 + 5)
    assert S.UP is status_of(registry)


def test_a_reregistration_while_held_stays_down_and_its_claim_is_kept(registry: Registry):
    registry.check_failed("ORDERS", "i-1", "timed out", now_ms=T0 + 1)
    registry.register(make("i-1", status=S.STARTING, dirty=T0 + 2, metadata=CHECKED), now_ms=T0 + 2)
    assert S.DOWN is status_of(registry)
    registry.check_passed("ORDERS", "i-1", now_ms=T0 + 3)
    assert S.STARTING is status_of(registry)


def test_the_verdict_goes_with_the_instance(registry: Registry):
    registry.check_failed("ORDERS", "i-1", "timed out", now_ms=T0 + 1)
    registry.cancel("ORDERS", "i-1", now_ms=T0 + 2)
    assert "i-1" not in registry.checks
    registry.register(make("i-1", dirty=T0 + 3), now_ms=T0 + 3)
    assert S.UP is status_of(registry)


def test_a_peers_copy_while_held_keeps_the_clients_claim(registry: Registry):
    """A peer's copy may carry a check's DOWN: it is no client's claim, and the recovery
    restores the client's."""
    registry.check_failed("ORDERS", "i-1", "timed out", now_ms=T0 + 1)
    copy = make("i-1", status=S.DOWN, dirty=T0 + 2, metadata=CHECKED)
    registry.register(copy, now_ms=T0 + 2, is_replication=True)
    registry.check_passed("ORDERS", "i-1", now_ms=T0 + 3)
    assert S.UP is status_of(registry)


def test_a_reregistration_asking_for_no_check_ends_the_hold(registry: Registry):
    """Nothing would ever release it otherwise: the client's own claim decides again."""
    registry.check_failed("ORDERS", "i-1", "refused", now_ms=T0 + 2)
    registry.register(make("i-1", dirty=T0 + 3), now_ms=T0 + 3)  # no check asked for
    assert "i-1" not in registry.checks
    assert S.UP is status_of(registry)
