"""Instances per client credential: `limits.max_instances_per_credential` new instances at most for
one client user, so that one leaked or buggy credential cannot fill the registry for all.

Who registered an instance is remembered here, from the registration until the instance goes
(cancelled or evicted: a registry listener); registering again is never counted twice. It is
memory only: after a restart the restored instances have no owner until they register again.
"""

from __future__ import annotations

from collections import Counter

from registry.core.model import ActionType, ChangeEvent
from registry.core.subscriber import Subscriber
from registry.errors import LimitReached

InstanceKey = tuple[str, str]


class CredentialQuotas(Subscriber):
    def __init__(self, *, per_credential: int) -> None:
        self.per_credential = per_credential
        self._owners: dict[InstanceKey, str] = {}
        self._counts: Counter[str] = Counter()

    def admit(self, user: str, app: str, instance_id: str) -> None:
        """Refuse (LimitReached) `user`'s registration of a new instance past its quota."""
        key = (app, instance_id)
        if key not in self._owners and self._counts[user] >= self.per_credential:
            raise LimitReached(
                f"the client credential {user!r} holds {self._counts[user]} instances, "
                "limits.max_instances_per_credential"
            )

    def registered(self, user: str, app: str, instance_id: str) -> None:
        key = (app, instance_id)
        if key not in self._owners:
            self._owners[key] = user
            self._counts[user] += 1

    def on_change(self, event: ChangeEvent) -> None:
        """Registry listener: an instance gone frees its owner's place."""
        if event.action is ActionType.DELETED:
            instance = event.lease.instance
            user = self._owners.pop((instance.app, instance.instance_id), None)
            if user is not None:
                self._counts[user] -= 1
                if not self._counts[user]:
                    del self._counts[user]

    def held_by(self, user: str) -> int:
        return self._counts[user]
