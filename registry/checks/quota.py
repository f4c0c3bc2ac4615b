"""Instances with a client's check, per client credential: `checks.max_per_credential`
at most for one client user, so that one credential cannot have the registry check hundreds
of instances it made up (a flood at whatever address they name, paced or not).

Who asked is remembered on the node the instance registered with, from the registration
until the instance goes or stops asking (the checker tells); in memory only, as
registry/core/quotas.py: after a restart the restored instances count again as their clients
register. Pure.
"""

from __future__ import annotations

from collections import Counter

from registry.errors import LimitReached


class CheckQuota:
    def __init__(self, *, per_credential: int) -> None:
        self.per_credential = per_credential  # 0: no cap
        self.refused = 0  # registrations refused for it
        self._owners: dict[str, str] = {}  # instance id -> the client user that asked
        self._counts: Counter[str] = Counter()

    def admit(self, user: str, instance_id: str) -> None:
        """Refuse (LimitReached) a check for `user`'s instance past its quota."""
        if not self.per_credential or self._owners.get(instance_id) == user:
            return
        if self._counts[user] >= self.per_credential:
            self.refused += 1
            raise LimitReached(
                f"the client credential {user!r} has {self._counts[user]} instances checked "
                "by the registry, checks.max_per_credential"
            )

    def asked(self, user: str, instance_id: str) -> None:
        """`user`'s registration of `instance_id`, asking for a check, was taken."""
        if self._owners.get(instance_id) == user:
            return
        self.forget(instance_id)
        self._owners[instance_id] = user
        self._counts[user] += 1

    def forget(self, instance_id: str) -> None:
        """The instance went, or asks for no check any more."""
        user = self._owners.pop(instance_id, None)
        if user is not None:
            self._counts[user] -= 1
            if not self._counts[user]:
                del self._counts[user]

    def __contains__(self, instance_id: object) -> bool:
        return instance_id in self._owners

    def held_by(self, user: str) -> int:
        return self._counts[user]
