"""The items a node sends in a replication batch (contract 11.4), built when they are sent.

A register or heartbeat is encoded from the registry's copy at that moment, so a task that
waited in the queue still carries the newest data; an instance gone by then is not sent (its
cancel, or its eviction, which is local to each node, explains why).

Each item is encoded once for all peers: the first peer's dispatcher to send a task keeps the
JSON bytes on it, and the others send the same bytes, as long as the registry still holds the
very instance they were made from (any change to an instance replaces it). A heartbeat's item
sent to the second peer a little later than to the first is no staler than one that waited
that much longer in the queue.
"""

from __future__ import annotations

from typing import Any

import orjson

from peers.pending import Task
from registry.codec import json_codec
from registry.codec.checks import app_check_fields, app_check_removal_fields, held_fields
from registry.codec.notes import note_fields
from registry.core.model import InstanceStatus, ReplicationAction
from registry.core.overrides import Note
from registry.core.registry import Registry
from registry.errors import UnknownInstance

_A = ReplicationAction


def encoded(task: Task, registry: Registry, *, now_ms: int, stock: bool = False) -> bytes | None:
    """`task`'s batch item as JSON, made once for every peer of ours (see above); None when
    there is nothing left to send. For a `stock` Eureka peer, Eureka's item alone, made anew:
    Eureka's server refuses a whole batch whose items carry a field it does not know."""
    instance = None
    if task.action is _A.HEARTBEAT or task.action is _A.REGISTER:
        instance = registry.instance_or_none(task.app, task.instance_id, now_ms=now_ms)
        if instance is None:
            return None
    if stock:
        item = encode(task, registry, now_ms=now_ms, stock=True)
        return None if item is None else orjson.dumps(item)
    if task.item is None or task.item_of is not instance:
        item = encode(task, registry, now_ms=now_ms)
        if item is None:
            return None
        task.item, task.item_of = orjson.dumps(item), instance
    return task.item


def encode(
    task: Task, registry: Registry, *, now_ms: int, stock: bool = False
) -> dict[str, Any] | None:
    """The batch item for `task`, or None when there is nothing left to send. For our peers,
    an override's item carries its note (reason, author, when set, expiry) and a removal's its
    time in fields of ours: every node then lists the same note and expires it on time. A
    `stock` Eureka peer gets Eureka's fields alone."""
    if task.action is _A.APP_CHECK:
        return None if stock else app_check_item(task.app, registry)
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
            if not stock and registry.asks_check(instance):
                # Whether a server-side check holds it DOWN, so that every node holds it alike
                # and any of them can take the check over (registry/checks/).
                item["checkHeld"] = held_fields(registry.checks.get(task.instance_id))
    elif stock:
        if task.action is not _A.CANCEL:
            item["lastDirtyTimestamp"] = task.last_dirty_ms
            item["status"] = (task.status or InstanceStatus.UNKNOWN).value
    elif task.action is _A.CANCEL:
        # What was removed and when, so that the peer keeps a copy of its own that is newer,
        # and remembers the removal (registry/core/tombstones.py). None: registered again since.
        removal = registry.tombstones.get(task.app, task.instance_id)
        if removal is not None:
            item["lastDirtyTimestamp"] = removal.dirty_ms
            item["removedAt"] = removal.at_ms
    else:
        item["lastDirtyTimestamp"] = task.last_dirty_ms
        item["status"] = (task.status or InstanceStatus.UNKNOWN).value
        note = registry.overrides.notes.of(task.instance_id, task.status) if task.status else None
        if task.action is _A.STATUS_UPDATE and note is not None and note.set_ms == task.at_ms:
            item |= note_fields(note)
        elif task.action is _A.STATUS_UPDATE and task.at_ms is not None:
            # Changed here since: the decision goes with its time alone, and a peer that
            # holds a later one keeps it.
            item |= note_fields(
                Note(task.app, task.status or InstanceStatus.UNKNOWN, None, task.at_ms, None)
            )
        if task.action is _A.DELETE_STATUS_OVERRIDE and task.at_ms is not None:
            item["overrideRemovedAt"] = task.at_ms
    item["action"] = task.action.value
    return item


def app_check_item(app: str, registry: Registry) -> dict[str, Any] | None:
    """An admin's check on `app` as this node now has it, set or removed (a newer decision
    than the call that queued it goes in its place); None when it has neither. Our peers
    only: Eureka's servers know no such item."""
    item: dict[str, Any] = {"action": _A.APP_CHECK.value, "appName": app}
    check = registry.app_checks.get(app)
    if check is not None:
        return item | {"appCheck": app_check_fields(check)}
    removed_ms = registry.app_checks.removed_at(app)
    if removed_ms is None:
        return None
    return item | {"appCheckRemoved": app_check_removal_fields(app, removed_ms)}
