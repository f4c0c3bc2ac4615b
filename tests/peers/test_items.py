"""Batch items: encoded from the registry when sent, and once for all peers."""

from __future__ import annotations

import orjson

from peers import items
from peers.pending import Task
from registry.core.model import InstanceStatus, ReplicationAction
from registry.core.overrides import Note
from registry.core.registry import Registry
from tests.factories import T0, make

A = ReplicationAction


def registered() -> Registry:
    registry = Registry()
    registry.register(make("i-1"), now_ms=T0)
    return registry


class TestOnceForAllPeers:
    def test_the_second_peer_gets_the_first_ones_bytes(self):
        registry, task = registered(), Task(A.HEARTBEAT, "ORDERS", "i-1", 0.0)
        first = items.encoded(task, registry, now_ms=T0 + 1)
        registry.renew("ORDERS", "i-1", T0 + 2)  # a heartbeat changes no instance
        assert first is items.encoded(task, registry, now_ms=T0 + 3)
        sent = {"appName": "ORDERS", "id": "i-1", "action": "Heartbeat", "status": "UP"}
        assert sent.items() <= orjson.loads(first or b"").items()

    def test_an_instance_changed_in_between_is_encoded_again(self):
        """Whatever a peer is sent is what the registry holds when it is sent."""
        registry, task = registered(), Task(A.REGISTER, "ORDERS", "i-1", 0.0)
        first = items.encoded(task, registry, now_ms=T0 + 1)
        registry.register(make("i-1", dirty=T0 + 2, status=InstanceStatus.DOWN), now_ms=T0 + 2)
        second = orjson.loads(items.encoded(task, registry, now_ms=T0 + 3) or b"")
        assert (first is not None, "DOWN", "DOWN") == (
            True,
            second["status"],
            second["instanceInfo"]["status"],
        )

    def test_an_instance_gone_in_between_is_not_sent(self):
        registry, task = registered(), Task(A.HEARTBEAT, "ORDERS", "i-1", 0.0)
        assert items.encoded(task, registry, now_ms=T0 + 1) is not None
        registry.cancel("ORDERS", "i-1", now_ms=T0 + 2)
        assert items.encoded(task, registry, now_ms=T0 + 3) is None

    def test_an_override_item_is_what_the_call_set(self):
        registry = registered()
        task = Task(A.STATUS_UPDATE, "ORDERS", "i-1", 0.0, InstanceStatus.OUT_OF_SERVICE, T0)
        first = items.encoded(task, registry, now_ms=T0 + 1)
        assert first is items.encoded(task, registry, now_ms=T0 + 2)
        assert ("StatusUpdate", "OUT_OF_SERVICE", T0) == tuple(
            orjson.loads(first or b"")[key] for key in ("action", "status", "lastDirtyTimestamp")
        )


class TestForAStockEurekaPeer:
    """Eureka's server refuses a whole batch whose items carry a field it does not know (it
    answers 400 'cannot parse request body'): a stock peer gets Eureka's fields alone."""

    EUREKAS = frozenset(
        {"appName", "id", "action", "status", "lastDirtyTimestamp", "overriddenStatus"}
    )

    def test_an_override_goes_without_its_note(self):
        registry = registered()
        note = Note("ORDERS", InstanceStatus.OUT_OF_SERVICE, "disk swap", T0 + 5, T0 + 60_000)
        registry.set_status_override(
            "ORDERS", "i-1", InstanceStatus.OUT_OF_SERVICE, now_ms=T0 + 5, note=note
        )
        task = Task(
            A.STATUS_UPDATE, "ORDERS", "i-1", 0.0, InstanceStatus.OUT_OF_SERVICE, T0, T0 + 5
        )
        ours = orjson.loads(items.encoded(task, registry, now_ms=T0 + 6) or b"")
        stock = orjson.loads(items.encoded(task, registry, now_ms=T0 + 6, stock=True) or b"")
        assert "disk swap" == ours["overrideReason"]
        assert ({k: ours[k] for k in stock}, set()) == (stock, stock.keys() - self.EUREKAS)

    def test_a_cancel_and_an_override_removal_go_without_their_times(self):
        registry = registered()
        registry.cancel("ORDERS", "i-1", now_ms=T0 + 5)
        cancel = Task(A.CANCEL, "ORDERS", "i-1", 0.0)
        removal = Task(
            A.DELETE_STATUS_OVERRIDE, "ORDERS", "i-1", 0.0, InstanceStatus.UNKNOWN, T0, T0 + 5
        )
        for task, ours_only in ((cancel, "removedAt"), (removal, "overrideRemovedAt")):
            ours = orjson.loads(items.encoded(task, registry, now_ms=T0 + 6) or b"")
            stock = orjson.loads(items.encoded(task, registry, now_ms=T0 + 6, stock=True) or b"")
            assert ours_only in ours
            assert set() == stock.keys() - self.EUREKAS
