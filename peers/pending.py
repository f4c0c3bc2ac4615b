"""What a node still owes one peer: replication tasks, coalesced and bounded (contract 11.3).

Tasks wait in two ordered maps, changes (register, cancel, override set and delete) and
heartbeats. A newer task with the same key (action, app, id) replaces the pending one and moves
to the back, so a map's order is always the order of the latest occurrences. A cancel drops the
instance's other pending tasks and a register its heartbeat: the peer would only undo them.

One task is queued for every peer (the same object in each peer's maps), and its batch item,
once encoded for one peer, is sent to the others as the same bytes (`peers.items`).

Changes are sent before heartbeats. That is safe because a heartbeat (and a register) is
encoded from the registry when it is sent, never from what was true when it was queued. When
the maps hold `limit` tasks, the oldest heartbeat is dropped to make room, and only when no
heartbeat is left the oldest change: heartbeats come again every 30 s, admin decisions do not.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice

from registry.core.model import InstanceInfo, InstanceStatus, ReplicationAction

_A = ReplicationAction
Key = tuple[ReplicationAction, str, str]


class Task:
    """One change owed to the peers. A plain class with slots: one is made per heartbeat, and
    a frozen dataclass's constructor costs twice as much."""

    __slots__ = (
        "action",
        "app",
        "at_ms",
        "instance_id",
        "item",
        "item_of",
        "key",
        "last_dirty_ms",
        "queued_at",
        "status",
    )

    def __init__(
        self,
        action: ReplicationAction,
        app: str,
        instance_id: str,
        queued_at: float,  # monotonic seconds
        # What an override call set, kept from the moment it happened (contract 11.2).
        status: InstanceStatus | None = None,
        last_dirty_ms: int | None = None,
        at_ms: int | None = None,  # when an override was set or removed, by the wall clock
    ) -> None:
        self.action = action
        self.at_ms = at_ms
        self.app = app
        self.instance_id = instance_id
        self.queued_at = queued_at
        self.status = status
        self.last_dirty_ms = last_dirty_ms
        self.key: Key = (action, app, instance_id)
        # The batch item as sent to the first peer, and the registry's instance it was
        # encoded from (None: it reads no instance); see peers.items.
        self.item: bytes | None = None
        self.item_of: InstanceInfo | None = None

    def __repr__(self) -> str:
        return f"Task({self.action.value} {self.app}/{self.instance_id} at {self.queued_at})"


class PendingTasks:
    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        self._changes: dict[Key, Task] = {}
        self._heartbeats: dict[Key, Task] = {}
        self.coalesced = 0  # tasks replaced by a newer one for the same key
        self.dropped_heartbeats = 0  # pushed out by a full queue
        self.dropped_changes = 0

    def add(self, task: Task) -> None:
        """Queue `task`, replacing the pending one with its key; drop the oldest when full."""
        key = task.key
        if task.action is _A.HEARTBEAT:  # the hot path: written out
            heartbeats = self._heartbeats
            if heartbeats.pop(key, None) is not None:
                self.coalesced += 1
            heartbeats[key] = task
            if len(heartbeats) + len(self._changes) > self.limit:
                self._trim()
            return
        if task.action is _A.CANCEL:
            for action in (_A.REGISTER, _A.STATUS_UPDATE, _A.DELETE_STATUS_OVERRIDE):
                self._discard(self._changes, (action, task.app, task.instance_id))
        if task.action in (_A.CANCEL, _A.REGISTER):
            self._discard(self._heartbeats, (_A.HEARTBEAT, task.app, task.instance_id))
        self._put(self._changes, key, task)
        self._trim()

    def take(self, count: int) -> list[Task]:
        """Remove and return up to `count` tasks: the oldest changes, then the oldest heartbeats."""
        batch: list[Task] = []
        for tasks in (self._changes, self._heartbeats):
            for key in list(islice(tasks, count - len(batch))):
                batch.append(tasks.pop(key))
        return batch

    def put_back(self, tasks: Iterable[Task]) -> None:
        """Return an unsent batch to the front; a task queued since for the same key wins."""
        failed = list(tasks)
        for name in ("_changes", "_heartbeats"):
            current: dict[Key, Task] = getattr(self, name)
            kept = {
                t.key: t
                for t in failed
                if (t.action is _A.HEARTBEAT) == (name == "_heartbeats") and t.key not in current
            }
            setattr(self, name, kept | current)
        self._trim()

    def due_at(self, *, heartbeat_delay: float, change_delay: float) -> float | None:
        """When the oldest task has waited long enough to be sent; None when there is none."""
        times = [
            first.queued_at + delay
            for tasks, delay in ((self._changes, change_delay), (self._heartbeats, heartbeat_delay))
            if (first := next(iter(tasks.values()), None)) is not None
        ]
        return min(times, default=None)

    def oldest_queued_at(self) -> float | None:
        firsts = (next(iter(t.values()), None) for t in (self._changes, self._heartbeats))
        return min((f.queued_at for f in firsts if f is not None), default=None)

    @property
    def dropped(self) -> int:
        return self.dropped_heartbeats + self.dropped_changes

    def __len__(self) -> int:
        return len(self._changes) + len(self._heartbeats)

    def _put(self, tasks: dict[Key, Task], key: Key, task: Task) -> None:
        if tasks.pop(key, None) is not None:
            self.coalesced += 1
        tasks[key] = task

    def _discard(self, tasks: dict[Key, Task], key: Key) -> None:
        if tasks.pop(key, None) is not None:
            self.coalesced += 1

    def _trim(self) -> None:
        while len(self) > self.limit:
            if self._heartbeats:
                del self._heartbeats[next(iter(self._heartbeats))]
                self.dropped_heartbeats += 1
            else:
                del self._changes[next(iter(self._changes))]
                self.dropped_changes += 1
