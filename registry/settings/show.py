"""The settings in effect as TOML-like text, by section, each value with where it came from;
a secret that is set shows as "****" (never its length), one that is not as its empty value."""

from __future__ import annotations

import json
from collections.abc import Callable

from registry.settings.layers import Loaded, Source
from registry.settings.sections import SECTIONS

MASK = '"****"'
COLUMN = 48  # where the comment saying a value's source starts, when the value leaves room


def render(loaded: Loaded, label: Callable[[Source], str] = lambda s: s.value) -> str:
    """`[section]` then `key = value  # source` lines, a blank line between sections; `label`
    names a source (the defaults file may be called "default")."""
    lines = []
    for section in SECTIONS:
        values = getattr(loaded.settings, section.NAME)
        lines.append(f"[{section.NAME}]")
        for key in values.__struct_fields__:
            value = getattr(values, key)
            shown = MASK if key in section.SECRETS and value else toml_value(value)
            assignment = f"{key} = {shown}"
            lines.append(f"{assignment:<{COLUMN}} # {label(loaded.source(section.NAME, key))}")
        lines.append("")
    return "\n".join(lines)


def toml_value(value: object) -> str:
    """`value` as TOML writes it: true, 8761, 0.5, "text", ["a", "b"]."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a TOML basic string reads the same
