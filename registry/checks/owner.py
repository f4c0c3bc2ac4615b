"""Which node checks which instance: rendezvous hashing over the nodes that answer.

Every node scores each (node, instance) pair with the same hash and the highest score owns the
instance, so nodes that see the same members agree without a word more, and when a node goes
(or comes) only its own share moves. Members are named by their runs' epochs (a restarted
node is a new member: its share moves once). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b


def owner(instance_id: str, members: Sequence[str]) -> str:
    """The member that checks `instance_id`."""
    return max(members, key=lambda member: _score(member, instance_id))


def _score(member: str, instance_id: str) -> bytes:
    return blake2b(f"{member}\0{instance_id}".encode(), digest_size=8).digest()
