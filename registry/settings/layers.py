"""Where settings come from, later layers winning: the defaults, a TOML file, the environment,
flags. `load_settings` reads them all and says where each value came from and which
deprecated names were used (`Loaded`).

The file: a table per section (`[leases]` then `eviction_interval = 5`). The environment:
`REGISTRY_<SECTION>__<KEY>` (`REGISTRY_LEASES__EVICTION_INTERVAL=5`), lists comma-separated.
Flags: `section__key` (`server__port`). A flat key at the top of the file or a variable without
a section is read as its new name (renamed.py) with a warning; given both ways in one layer,
it is refused, naming both.
"""

from __future__ import annotations

import enum
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry.settings.errors import SettingsError
from registry.settings.model import KEYS, SEPARATOR, Settings, build, named, ready
from registry.settings.renamed import RENAMED

ENV_PREFIX = "REGISTRY_"

# What Kubernetes puts in a pod's environment for a Service named `registry` or `registry-*`
# (service links): REGISTRY[_X]_SERVICE_HOST, ..._SERVICE_PORT[_NAME], ..._PORT_8761_TCP[_ADDR]
_SERVICE_LINK = re.compile(r"REGISTRY(_\w+)?_(SERVICE_(HOST|PORT)|PORT_\d+_(TCP|UDP|SCTP))")
_SERVICE_LINK_VALUE = re.compile(r"(tcp|udp|sctp)://", re.IGNORECASE)


class Source(enum.Enum):
    """Where a value came from."""

    DEFAULT = "default"
    FILE = "file"
    ENVIRONMENT = "environment"
    FLAG = "flag"


@dataclass(frozen=True, slots=True)
class Deprecation:
    """A setting given by its flat name: `old` (as given), `new` (how to give it now)."""

    old: str
    new: str
    source: Source

    def __str__(self) -> str:
        return f"{self.old} is deprecated: use {self.new}"


@dataclass(frozen=True, slots=True)
class Loaded:
    """Settings as loaded: where each value came from, and the deprecated names used."""

    settings: Settings
    sources: Mapping[tuple[str, str], Source]  # (section, key) given by some layer
    deprecations: tuple[Deprecation, ...]
    path: Path | None  # the file read, if any

    def source(self, section: str, key: str) -> Source:
        return self.sources.get((section, key), Source.DEFAULT)


def env_name(section: str, key: str) -> str:
    """The variable that gives `section.key`: `REGISTRY_LEASES__EVICTION_INTERVAL`."""
    return f"{ENV_PREFIX}{section.upper()}{SEPARATOR}{key.upper()}"


def load_settings(
    toml_path: Path | None = None, environ: Mapping[str, str] | None = None, **flags: Any
) -> Loaded:
    """Defaults, then the TOML file, then `REGISTRY_*` variables, then `flags` (named
    `section__key`; None: not given). SettingsError naming every problem found, each by
    section and key, its `warnings` the deprecated names used."""
    layers = [] if toml_path is None else [_file_layer(toml_path)]
    layers.append(_environment_layer(environ or {}))
    given = {name: value for name, value in flags.items() if value is not None}
    layers.append(_Layer(Source.FLAG, values=named(given)))
    problems = [problem for layer in layers for problem in layer.problems]
    deprecations = tuple(d for layer in layers for d in layer.deprecations)
    values: dict[str, dict[str, Any]] = {}
    sources: dict[tuple[str, str], Source] = {}
    for layer in layers:
        for (section, key), value in layer.values.items():
            values.setdefault(section, {})[key] = ready(section, key, value)
            sources[section, key] = layer.source
    try:
        settings = build(values)
    except SettingsError as exc:
        problems += exc.problems
    if problems:
        raise SettingsError(*problems, warnings=tuple(map(str, deprecations)))
    return Loaded(settings, sources, deprecations, toml_path)


@dataclass
class _Layer:
    """What one source gave, by (section, key), and how each was named there."""

    source: Source
    values: dict[tuple[str, str], Any] = field(default_factory=dict)
    names: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)  # name, old?
    deprecations: list[Deprecation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def give(self, section: str, key: str, value: Any, name: str, *, new: str = "") -> None:
        """`section.key` given as `name`; `new`: how it is named now, when `name` is
        deprecated."""
        if new:
            self.deprecations.append(Deprecation(name, new, self.source))
        if (section, key) in self.names:
            (other, other_old), old = self.names[section, key], bool(new)
            first, then = (other, name) if other_old and not old else (name, other)
            self.problems.append(
                f"{section}.{key}: given twice, as {first} (deprecated) and as {then}; keep "
                f"{then} only"
            )
        self.values[section, key] = value
        self.names[section, key] = (name, bool(new))


def _file_layer(path: Path) -> _Layer:
    layer = _Layer(Source.FILE)
    for name, value in _read_toml(path).items():
        if name in KEYS and isinstance(value, dict):  # [section]; a flat `peers` is a list
            for key, item in value.items():
                if key in KEYS[name]:
                    layer.give(name, key, item, f"[{name}] {key}")
                else:
                    layer.problems.append(f"{name}.{key}: unknown setting")
        elif name in RENAMED:
            section, key = RENAMED[name]
            layer.give(section, key, value, name, new=f"[{section}] {key}")
        elif name in KEYS:
            layer.problems.append(f"{name}: a section ([{name}]), not a setting")
        elif isinstance(value, dict):
            layer.problems.append(f"{name}: unknown section [{name}]")
        else:
            layer.problems.append(f"{name}: unknown setting")
    return layer


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read settings from {path}: {exc}") from None


def _environment_layer(environ: Mapping[str, str]) -> _Layer:
    layer = _Layer(Source.ENVIRONMENT)
    for variable, raw in environ.items():
        if not variable.startswith(ENV_PREFIX):
            continue
        if _SERVICE_LINK.match(variable) or _SERVICE_LINK_VALUE.match(raw):
            layer.problems.append(
                f"{variable}: a variable Kubernetes sets for a Service named 'registry' or "
                "'registry-...' (a service link), not a setting: set enableServiceLinks: false "
                "in the pod's spec, as deploy/kubernetes/statefulset.yaml does"
            )
            continue
        name = variable.removeprefix(ENV_PREFIX).lower()
        section, separator, key = name.partition(SEPARATOR)
        if separator and key in KEYS.get(section, {}):
            layer.give(section, key, raw, variable)
        elif separator:
            layer.problems.append(f"{section}.{key}: unknown setting ({variable})")
        elif name in RENAMED:
            section, key = RENAMED[name]
            layer.give(section, key, raw, variable, new=env_name(section, key))
        else:
            layer.problems.append(f"{name}: unknown setting ({variable})")
    return layer
