"""`Shape`: how one format writes documents in pieces (json_codec and xml_codec are each one,
compact's forms too). Its own module so that compact.py, which the package imports, can name it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from registry.core.model import InstanceInfo, LeaseRecord


class Shape(Protocol):
    """How one format writes documents in pieces (json_codec and xml_codec both are one)."""

    SEPARATOR: bytes  # between two items of a list
    APPLICATIONS_TAIL: bytes
    APPLICATION_HEAD: bytes  # around one application's block: GET apps/{app}
    APPLICATION_TAIL: bytes

    def instance_item(self, lease: LeaseRecord) -> bytes: ...
    def instance_parts(self, instance: InstanceInfo) -> tuple[bytes, bytes]: ...
    def lease_part(self, lease: LeaseRecord) -> bytes: ...
    def applications_head(self, *, version: str, hashcode: str) -> bytes: ...
    def application_block(self, name: str, items: Iterable[bytes]) -> bytes: ...
