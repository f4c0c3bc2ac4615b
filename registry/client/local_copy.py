"""The client's copy of the registry: pure, no IO, no clock.

A full fetch replaces it; a delta, a long-poll answer or a watch event is merged into it with
Eureka's rules (contract 9.3): ADDED and MODIFIED put the instance in place by id, creating its
application when needed; DELETED removes it, and the application with its last instance. Each
call says what changed as a list of `Change`s (a full fetch as the difference from the copy it
replaces), so subscribers see one story whichever way the copy was brought up to date.

A full fetch is taken in slices (see `replace`): lookups meanwhile see each instance either
as it was or as it is. The reconcile hash is kept from counts by status, like the server's,
so comparing it after every delta or event costs nothing that grows with the registry.
Lookups by application or VIP are answered from views built once per change of what they
show.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from registry.client.model import Action, Change, Instance
from registry.common.hashcode import hash_of_counts
from rules import InstanceStatus

UP = InstanceStatus.UP
SLICE = 256  # instances between two turns of the caller's loop


class LocalCopy:
    def __init__(self) -> None:
        self._apps: dict[str, dict[str, Instance]] = {}
        self._vips: dict[str, dict[tuple[str, str], Instance]] = {}
        self._statuses: Counter[InstanceStatus] = Counter()
        self._hash: str | None = None  # of the counts, made when asked after they change
        self._views: dict[tuple[str, bool], tuple[Instance, ...]] = {}

    def __len__(self) -> int:
        return sum(self._statuses.values())

    @property
    def empty(self) -> bool:
        return not self._apps

    def applications(self) -> list[str]:
        return sorted(self._apps)

    def reconcile_hash(self) -> str:
        """`apps__hashcode` of the copy, to compare with the server's."""
        if self._hash is None:
            self._hash = hash_of_counts(self._statuses)
        return self._hash

    def instances(self, name: str, *, up_only: bool = True) -> tuple[Instance, ...]:
        """The instances of application `name`, or else of VIP address `name` (either case),
        ordered by id; only the UP ones unless `up_only` is false."""
        key = (name.upper(), up_only)
        view = self._views.get(key)
        if view is None:
            found = self._apps.get(key[0]) or self._vips.get(key[0]) or {}
            chosen = (i for i in found.values() if i.status is UP or not up_only)
            view = self._views[key] = tuple(sorted(chosen, key=lambda i: i.instance_id))
        return view

    def replace(self, fetched: Iterable[Instance], changes: list[Change]) -> Iterator[None]:
        """Take a full fetch's instances in place of the copy, adding to `changes` what
        differs. A generator that stops every SLICE instances, so a caller on an event loop
        can give it a turn: at 100 000 instances this is a second of work."""
        incoming: dict[tuple[str, str], Instance] = {}
        for n, instance in enumerate(fetched, 1):
            incoming[(instance.app, instance.instance_id)] = instance
            if n % SLICE == 0:
                yield
        gone = [
            old
            for app in self._apps.values()
            for old in app.values()
            if (old.app, old.instance_id) not in incoming
        ]
        yield
        for n, old in enumerate(gone, 1):
            self._remove(old)
            changes.append(Change(Action.DELETED, old))
            if n % SLICE == 0:
                yield
        for n, instance in enumerate(incoming.values(), 1):
            if (put := self._put(instance)) is not None:
                changes.append(put)
            if n % SLICE == 0:
                yield

    def apply(self, action: Action, instance: Instance) -> Change | None:
        """Merge one changed instance; the change it made to the copy, if any."""
        if action is Action.DELETED:
            old = self._apps.get(instance.app, {}).get(instance.instance_id)
            if old is None:
                return None
            self._remove(old)
            return Change(Action.DELETED, old)
        return self._put(instance)

    def _put(self, instance: Instance) -> Change | None:
        app = self._apps.setdefault(instance.app, {})
        old = app.get(instance.instance_id)
        if old == instance:
            return None
        if old is not None:
            self._forget(old)
        app[instance.instance_id] = instance
        self._statuses[instance.status] += 1
        self._hash = None
        for vip in instance.vips:
            self._vips.setdefault(vip, {})[(instance.app, instance.instance_id)] = instance
        self._drop_views(instance, old)
        return Change(Action.ADDED if old is None else Action.MODIFIED, instance)

    def _remove(self, old: Instance) -> None:
        app = self._apps[old.app]
        del app[old.instance_id]
        if not app:
            del self._apps[old.app]
        self._forget(old)
        self._drop_views(old, None)

    def _forget(self, old: Instance) -> None:
        """Take `old` out of the counts and the VIP index (not out of its application)."""
        self._statuses[old.status] -= 1
        self._hash = None
        if not self._statuses[old.status]:
            del self._statuses[old.status]
        for vip in old.vips:
            holders = self._vips[vip]
            del holders[(old.app, old.instance_id)]
            if not holders:
                del self._vips[vip]

    def _drop_views(self, instance: Instance, old: Instance | None) -> None:
        if not self._views:
            return
        for name in (instance.app, *instance.vips, *(old.vips if old else ())):
            self._views.pop((name, True), None)
            self._views.pop((name, False), None)


def matches(change: Change, name: str | None) -> bool:
    """Whether a change concerns application or VIP `name` (None: every change)."""
    if name is None:
        return True
    key = name.upper()
    return change.instance.app == key or key in change.instance.vips
