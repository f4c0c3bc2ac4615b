"""The items a node sends in a replication batch (contract 11.4), built when they are sent.

A register or heartbeat is encoded from the registry's copy at that moment, so a task that
waited in the queue still carries the newest data; an instance gone by then is not sent (its
cancel, or its eviction, which is local to each node, explains why).
"""

from __future__ import annotations

from typing import Any

from peers.pending import Task
from registry.codec import json_codec
from registry.core import Registry
from registry.errors import UnknownInstance
from registry.model import InstanceStatus, ReplicationAction
from registry.overrides import note_fields

_A = ReplicationAction


def encode(task: Task, registry: Registry, *, now_ms: int) -> dict[str, Any] | None:
    """The batch item for `task`, or None when there is nothing left to send. An override's
    item carries its note (reason, author, when set, expiry) in fields of ours, which stock
    Eureka peers ignore: every node then lists the same note and expires it on time."""
    item: dict[str, Any] = {"appName": task.app, "id": task.instance_id}
    if task.action in (_A.REGISTER, _A.HEARTBEAT):
        try:
            lease = registry.get(task.app, task.instance_id, now_ms=now_ms)
        except UnknownInstance:
            return None
        instance = lease.instance
        item["lastDirtyTimestamp"] = instance.last_dirty_ms
        item["status"] = instance.status.value
        if instance.overridden_status is not InstanceStatus.UNKNOWN:
            item["overriddenStatus"] = instance.overridden_status.value
        if task.action is _A.REGISTER:
            item["instanceInfo"] = json_codec.instance_dict(lease)
    elif task.action is not _A.CANCEL:
        item["lastDirtyTimestamp"] = task.last_dirty_ms
        item["status"] = (task.status or InstanceStatus.UNKNOWN).value
        note = registry.notes.of(task.instance_id, task.status) if task.status else None
        if task.action is _A.STATUS_UPDATE and note is not None:
            item |= note_fields(note)
    item["action"] = task.action.value
    return item
