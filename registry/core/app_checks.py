"""Admins' checks by application: a check an admin attaches to every instance of an
application, those registered later included (what the instance's own metadata asks for is set
aside while its application has one: the admin plane outranks the client's).

Each is a decision with a time, as an override is: set (with what to check) or removed. Nodes
hear decisions in any order (replication, anti-entropy, a start-up copy, a restart's store);
the later decision on an application wins everywhere, at equal times a set over a removal and
then the greater of the two, so every node ends up with the same one. Removals are kept (one
per application ever checked), or a partitioned node's older check would come back. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

MAX_BY = 200  # characters of the name of the admin who set a check, as of an override's


@dataclass(frozen=True, slots=True)
class AppCheck:
    app: str
    kind: str  # "http" or "tcp", as an instance's `registry.check`
    interval: float  # seconds
    timeout: float  # seconds
    path: str | None  # http: GET this at the instance's address and port; None: healthCheckUrl
    set_ms: int
    by: str | None = None  # the admin's user name, when credentials are configured

    def order(self) -> tuple[int, int, str, float, float, str, str]:
        return (
            self.set_ms,
            1,
            self.kind,
            self.interval,
            self.timeout,
            self.path or "",
            self.by or "",
        )


def _removal_order(at_ms: int) -> tuple[int, int, str, float, float, str, str]:
    return (at_ms, 0, "", 0.0, 0.0, "", "")


class AppChecks:
    """Application -> the admin's check on it, and application -> when its check was removed."""

    def __init__(self) -> None:
        self._checks: dict[str, AppCheck] = {}
        self._removed: dict[str, int] = {}

    def __contains__(self, app: object) -> bool:
        return app in self._checks

    def __len__(self) -> int:
        return len(self._checks)

    def __iter__(self) -> Iterator[AppCheck]:
        return iter(list(self._checks.values()))

    def get(self, app: str) -> AppCheck | None:
        return self._checks.get(app)

    def removals(self) -> list[tuple[str, int]]:
        """(application, when its check was removed), for peers and the store."""
        return list(self._removed.items())

    def removed_at(self, app: str) -> int | None:
        return self._removed.get(app)

    def next_ms(self, app: str, now_ms: int) -> int:
        """The time to give an admin's new call on `app`: now, or just after this node's last
        decision on it (a clock that stepped back, two calls in one millisecond), so that the
        call is always the latest decision here."""
        return max(now_ms, self._latest(app)[0] + 1)

    def take(self, check: AppCheck) -> bool:
        """`check`, when it is later than this node's decision on its application (see
        above); whether it was taken."""
        if check.order() <= self._latest(check.app):
            return False
        self._checks[check.app] = check
        self._removed.pop(check.app, None)
        return True

    def take_removal(self, app: str, at_ms: int) -> bool:
        """A removal at `at_ms`, when later than this node's decision; whether it was taken
        (a removal of what was never set here is remembered too, to weigh later copies)."""
        if _removal_order(at_ms) <= self._latest(app):
            return False
        self._checks.pop(app, None)
        self._removed[app] = at_ms
        return True

    def _latest(self, app: str) -> tuple[int, int, str, float, float, str, str]:
        check = self._checks.get(app)
        if check is not None:
            return check.order()
        removed = self._removed.get(app)
        return _removal_order(-1) if removed is None else _removal_order(removed)
