"""The status-override rule chain: which status an instance really has."""

from rules.chain import CHAIN, Rule, first_match
from rules.rules import always_match, down_or_starting, lease_exists, override_exists
from rules.status import InstanceStatus

__all__ = [
    "CHAIN",
    "InstanceStatus",
    "Rule",
    "always_match",
    "down_or_starting",
    "first_match",
    "lease_exists",
    "override_exists",
]
