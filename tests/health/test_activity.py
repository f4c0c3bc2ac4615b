"""The activity summary: counts since the last one, nothing when nothing happened."""

from __future__ import annotations

from structlog.testing import capture_logs

from registry.core.registry import Registry
from registry.health.activity import Activity
from tests.factories import T0, make


def test_counts_since_the_last_summary():
    registry = Registry()
    activity = Activity(registry)
    assert None is activity.summary()
    registry.register(make("a"), now_ms=T0)
    registry.register(make("b"), now_ms=T0)
    registry.renew("ORDERS", "a", now_ms=T0 + 1)
    registry.cancel("ORDERS", "b", now_ms=T0 + 2)
    expected = {"registrations": 2, "cancels": 1, "evictions": 0, "renewals": 1, "instances": 1}
    assert expected == activity.summary()
    assert None is activity.summary()


def test_registrations_log_at_debug_and_the_summary_at_info():
    registry = Registry()
    activity = Activity(registry)
    with capture_logs() as logs:
        registry.register(make("a"), now_ms=T0)
        activity.log()
        activity.log()
    assert [("debug", "instance_registered"), ("info", "registry_activity")] == [
        (e["log_level"], e["event"]) for e in logs
    ]
