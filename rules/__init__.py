"""The status-override rule chain: which status an instance really has."""

from rules.chain import CHAIN, Decision, Rule, decide, first_match, interned, trace
from rules.rules import always_match, down_or_starting, lease_exists, override_exists
from rules.status import InstanceStatus

__all__ = [
    "CHAIN",
    "Decision",
    "InstanceStatus",
    "Rule",
    "always_match",
    "decide",
    "down_or_starting",
    "first_match",
    "interned",
    "lease_exists",
    "override_exists",
    "trace",
]
