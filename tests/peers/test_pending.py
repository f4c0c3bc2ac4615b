"""The per-peer queue: coalescing, order, and what a full queue gives up first."""

from __future__ import annotations

from peers.pending import PendingTasks, Task
from registry.core.model import InstanceStatus, ReplicationAction

A = ReplicationAction


def task(action: ReplicationAction, iid: str = "i-1", at: float = 0.0) -> Task:
    return Task(action, "ORDERS", iid, at)


def actions(batch: list[Task]) -> list[tuple[str, str]]:
    return [(t.action.value, t.instance_id) for t in batch]


class TestCoalescing:
    def test_a_thousand_heartbeats_are_one_task(self):
        """Heartbeats of one instance replace each other while they wait."""
        pending = PendingTasks(limit=100)
        for n in range(1000):
            pending.add(task(A.HEARTBEAT, at=n / 1000))
        assert (1, 999) == (len(pending), pending.coalesced)
        assert [0.999] == [t.queued_at for t in pending.take(10)]

    def test_a_replaced_task_moves_to_the_back(self):
        """Register, cancel, register again: the peer ends with the instance."""
        pending = PendingTasks(limit=100)
        pending.add(task(A.REGISTER))
        pending.add(task(A.CANCEL))
        pending.add(task(A.REGISTER))
        assert [("Cancel", "i-1"), ("Register", "i-1")] == actions(pending.take(10))

    def test_a_cancel_drops_what_it_would_undo(self):
        """Pending register, heartbeat and override of a cancelled instance are not sent."""
        pending = PendingTasks(limit=100)
        for action in (A.REGISTER, A.HEARTBEAT, A.STATUS_UPDATE, A.DELETE_STATUS_OVERRIDE):
            pending.add(task(action))
        pending.add(task(A.HEARTBEAT, "i-2"))
        pending.add(task(A.CANCEL))
        assert [("Cancel", "i-1"), ("Heartbeat", "i-2")] == actions(pending.take(10))

    def test_changes_leave_before_heartbeats(self):
        """A batch takes the oldest changes first, then the oldest heartbeats."""
        pending = PendingTasks(limit=100)
        pending.add(task(A.HEARTBEAT, "i-1"))
        pending.add(task(A.STATUS_UPDATE, "i-2"))
        pending.add(task(A.HEARTBEAT, "i-3"))
        assert [("StatusUpdate", "i-2"), ("Heartbeat", "i-1")] == actions(pending.take(2))
        assert [("Heartbeat", "i-3")] == actions(pending.take(2))


class TestBounds:
    def test_a_full_queue_drops_heartbeats_first(self):
        """Overrides and cancels survive while there is a heartbeat to give up."""
        pending = PendingTasks(limit=3)
        pending.add(task(A.HEARTBEAT, "h-1"))
        pending.add(task(A.STATUS_UPDATE, "o-1"))
        pending.add(task(A.HEARTBEAT, "h-2"))
        pending.add(task(A.CANCEL, "c-1"))
        pending.add(task(A.CANCEL, "c-2"))
        assert [("StatusUpdate", "o-1"), ("Cancel", "c-1"), ("Cancel", "c-2")] == actions(
            pending.take(10)
        )
        assert (2, 0) == (pending.dropped_heartbeats, pending.dropped_changes)

    def test_only_changes_left_the_oldest_goes(self):
        """With no heartbeat to drop, the oldest change is dropped, and counted."""
        pending = PendingTasks(limit=2)
        for iid in ("c-1", "c-2", "c-3"):
            pending.add(task(A.CANCEL, iid))
        assert [("Cancel", "c-2"), ("Cancel", "c-3")] == actions(pending.take(10))
        assert 1 == pending.dropped_changes


class TestRetry:
    def test_a_failed_batch_goes_back_to_the_front(self):
        """Unsent tasks come before newer ones, unless a newer one has the same key."""
        pending = PendingTasks(limit=100)
        pending.add(task(A.STATUS_UPDATE, "i-1", at=1))
        pending.add(task(A.HEARTBEAT, "i-2", at=1))
        failed = pending.take(10)
        pending.add(Task(A.STATUS_UPDATE, "ORDERS", "i-1", 5, InstanceStatus.UP))
        pending.add(task(A.CANCEL, "i-3", at=5))
        pending.put_back(failed)
        batch = pending.take(10)
        assert [("StatusUpdate", "i-1"), ("Cancel", "i-3"), ("Heartbeat", "i-2")] == actions(batch)
        assert InstanceStatus.UP is batch[0].status  # the newer override won

    def test_due_time_depends_on_the_kind(self):
        """Heartbeats wait the batch delay to coalesce; changes only the short change delay."""
        pending = PendingTasks(limit=100)
        assert pending.due_at(heartbeat_delay=0.5, change_delay=0.02) is None
        pending.add(task(A.HEARTBEAT, at=10.0))
        assert 10.5 == pending.due_at(heartbeat_delay=0.5, change_delay=0.02)
        pending.add(task(A.REGISTER, "i-2", at=10.1))
        assert 10.12 == pending.due_at(heartbeat_delay=0.5, change_delay=0.02)
