"""The statuses an instance can have, as Eureka spells them on the wire."""

from __future__ import annotations

from enum import StrEnum


class InstanceStatus(StrEnum):
    UP = "UP"
    DOWN = "DOWN"
    STARTING = "STARTING"
    OUT_OF_SERVICE = "OUT_OF_SERVICE"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, text: str) -> InstanceStatus:
        """The status named by `text`, case-insensitively; ValueError for anything else."""
        try:
            return cls(text.strip().upper())
        except ValueError:
            expected = ", ".join(cls)
            raise ValueError(f"unknown status {text!r}; expected one of {expected}") from None
