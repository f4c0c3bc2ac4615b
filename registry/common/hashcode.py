"""The reconcile hash clients compare after applying a delta (contract 4.4, 9.3)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from rules import InstanceStatus


def reconcile_hash(statuses: Iterable[InstanceStatus]) -> str:
    """`STATUS_count_` for each status present, in alphabetical order: `DOWN_1_UP_2_`."""
    return hash_of_counts(Counter(statuses))


def hash_of_counts(counts: Mapping[InstanceStatus, int]) -> str:
    """The reconcile hash of instances counted by status (statuses counted 0 are absent)."""
    return "".join(f"{status}_{counts[status]}_" for status in sorted(counts) if counts[status])
