"""Settings that cannot be used, each problem on a line of its own naming its section and key.

msgspec says where a value failed as a path (`Expected `float` > 0.0 - at `$.leases.x``);
`problems_of` turns that into `leases.x: Expected float > 0.0`. The sections' own rules raise
problems already named so. No problem shows a secret's value: msgspec's messages show none,
and the rules about credentials are written not to.
"""

from __future__ import annotations

import re

import msgspec

_AT = re.compile(r"(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?", re.DOTALL)
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<key>[^`]+)`")
_NAMED = re.compile(r"[\w.\[\]]+: ")  # a line that already says which setting it is about


class SettingsError(ValueError):
    """Settings that cannot be used; `problems` holds one line per problem, `warnings` what
    else was found (deprecated names)."""

    def __init__(self, *problems: str, warnings: tuple[str, ...] = ()) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.warnings = warnings


def problems_of(exc: msgspec.ValidationError, where: str = "") -> list[str]:
    """msgspec's refusal as problems, each named by section and key; `where` is the path of
    what was converted (`leases` for a section, `leases.x` for a single value)."""
    found = _AT.fullmatch(str(exc))
    assert found is not None  # the pattern matches any text
    message, path = found["message"], (found["path"] or "").removeprefix(".")
    named = ".".join(part for part in (where, path) if part)
    unknown = _UNKNOWN.fullmatch(message)
    if unknown:
        return [f"{'.'.join(p for p in (named, unknown['key']) if p)}: unknown setting"]
    lines = message.splitlines()
    if all(_NAMED.match(line) for line in lines):  # a section's own rules: named already
        return lines
    return [f"{named or 'settings'}: {message.replace('`', '')}"]
