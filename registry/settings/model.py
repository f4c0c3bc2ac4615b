"""`Settings`: one frozen object of sections, read once at start-up, and how one is built from
values named `section__key` (`store__enabled`), the spelling of the environment's variables
and of `Settings.of` alike."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import msgspec

from registry.settings import sections
from registry.settings.errors import SettingsError, problems_of
from registry.settings.sections import SECTIONS, Section
from registry.settings.values import is_loopback

# section -> key -> the key's type (with its constraints), in the order the settings list them
KEYS: dict[str, dict[str, Any]] = {
    section.NAME: {f.name: f.type for f in msgspec.structs.fields(section)} for section in SECTIONS
}
SECTION_TYPES: dict[str, type[Section]] = {section.NAME: section for section in SECTIONS}
SEPARATOR = "__"  # between section and key: `leases__eviction_interval`


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every setting, by section. Built by `load_settings` (layers.py: defaults, a TOML file, the
    environment, flags) or, in tests, `Settings.of(section__key=value, ...)`."""

    server: sections.ServerSettings = msgspec.field(default_factory=sections.ServerSettings)
    credentials: sections.CredentialSettings = msgspec.field(
        default_factory=sections.CredentialSettings
    )
    leases: sections.LeaseSettings = msgspec.field(default_factory=sections.LeaseSettings)
    self_preservation: sections.SelfPreservationSettings = msgspec.field(
        default_factory=sections.SelfPreservationSettings
    )
    reads: sections.ReadSettings = msgspec.field(default_factory=sections.ReadSettings)
    peers: sections.PeerSettings = msgspec.field(default_factory=sections.PeerSettings)
    checks: sections.CheckSettings = msgspec.field(default_factory=sections.CheckSettings)
    store: sections.StoreSettings = msgspec.field(default_factory=sections.StoreSettings)
    limits: sections.LimitSettings = msgspec.field(default_factory=sections.LimitSettings)
    logging: sections.LogSettings = msgspec.field(default_factory=sections.LogSettings)

    def __post_init__(self) -> None:
        problems = []
        for name in KEYS:  # converted again: msgspec checks constraints only when it converts
            section = getattr(self, name)
            try:
                msgspec.convert(msgspec.structs.asdict(section), type(section))
            except msgspec.ValidationError as exc:
                problems += problems_of(exc, name)
        problems += self._problems()
        if problems:
            raise SettingsError(*problems)

    def _problems(self) -> list[str]:
        """What sections break together."""
        problems = []
        if self.secured and self.peers.configured and not self.credentials.peer:
            problems.append(
                "credentials.peer: needed to replicate to peers once credentials are configured"
            )
        missing = self.missing_credentials()
        if missing and not is_loopback(self.server.host) and not self.server.insecure_public_bind:
            problems.append(
                f"server.host: {self.server.host!r} is not a loopback address, and "
                f"{' and '.join(missing)} are not set; configure them, bind to 127.0.0.1, or "
                "set [server] insecure_public_bind = true to serve anyone who can reach it"
            )
        return problems

    @property
    def secured(self) -> bool:
        """Credentials are configured: every plane asks for its own."""
        return self.credentials.configured

    def missing_credentials(self) -> list[str]:
        """The settings a plane in use lacks: it would be open (none at all) or closed."""
        missing = []
        if not self.credentials.clients:
            missing.append("credentials.clients")
        if not (self.credentials.admins or self.credentials.admin_tokens):
            missing.append("credentials.admins (or credentials.admin_tokens)")
        if self.peers.configured and not self.credentials.peer:
            missing.append("credentials.peer")
        return missing

    @classmethod
    def of(cls, **values: Any) -> Settings:
        """The defaults with `values` named `section__key` (`Settings.of(store__enabled=False)`),
        validated as a file's values are."""
        return build(nested(values))

    def replace(self, **values: Any) -> Settings:
        """These settings with `values` (named `section__key`) instead, validated again."""
        current = {name: msgspec.structs.asdict(getattr(self, name)) for name in KEYS}
        for section, given in nested(values).items():
            current[section].update(given)
        return build(current)


def nested(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`{"leases__eviction_interval": 5}` as `{"leases": {"eviction_interval": 5}}`, each value
    made ready for msgspec (`ready`); SettingsError for names that are no setting."""
    found: dict[str, dict[str, Any]] = {}
    for (section, key), value in named(values).items():
        found.setdefault(section, {})[key] = ready(section, key, value)
    return found


def named(values: Mapping[str, Any]) -> dict[tuple[str, str], Any]:
    """`{"leases__eviction_interval": 5}` as `{("leases", "eviction_interval"): 5}`;
    SettingsError for names that are no setting."""
    found: dict[tuple[str, str], Any] = {}
    unknown = []
    for name, value in values.items():
        section, _, key = name.partition(SEPARATOR)
        if key in KEYS.get(section, {}):
            found[section, key] = value
        else:
            unknown.append(f"{name}: unknown setting (settings are named section__key)")
    if unknown:
        raise SettingsError(*unknown)
    return found


def ready(section: str, key: str, value: Any) -> Any:
    """A value as given (by TOML, as text from the environment or a flag, or from Python)
    made ready for msgspec: a list's items stripped, blanks and repeats dropped (text is
    comma-separated: a password with a comma in it goes in the TOML file); yes and no for a
    boolean; peers' URLs and the DNS path with their trailing slash, so that `{url}apps/` is
    the right path."""
    kind = KEYS[section][key]
    if typing.get_origin(kind) is tuple:
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, list | tuple) and all(isinstance(i, str) for i in items):
            value = list(dict.fromkeys(i.strip() for i in items if i.strip()))
            if (section, key) == ("peers", "urls"):
                value = list(dict.fromkeys(u if u.endswith("/") else u + "/" for u in value))
    elif kind is bool and isinstance(value, str):
        value = {"yes": "true", "no": "false"}.get(value.strip().lower(), value.strip())
    elif (section, key) == ("peers", "dns_path") and isinstance(value, str):
        value = value if value.endswith("/") else value + "/"
    return value


def build(values: Mapping[str, Mapping[str, Any]]) -> Settings:
    """Settings from values by section (ready for msgspec); SettingsError naming every
    problem found, by section and key."""
    try:
        return msgspec.convert(values, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(*(_every_problem(values) or problems_of(exc))) from None


def _every_problem(values: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """As many problems as can be told apart: each key's own, then, in sections whose keys
    are sound, the section's rules, then, if every section is sound, those between them."""
    problems = []
    sound = True
    for section, given in values.items():
        found = []
        for key, value in given.items():
            try:
                msgspec.convert(value, KEYS[section][key], strict=False)
            except msgspec.ValidationError as exc:
                secret = key in SECTION_TYPES[section].SECRETS
                for problem in problems_of(exc, f"{section}.{key}"):
                    said = secret or not isinstance(value, str) or repr(value) in problem
                    found.append(problem if said else f"{problem} (given {value!r})")
        if not found:
            try:
                msgspec.convert(given, SECTION_TYPES[section], strict=False)
            except msgspec.ValidationError as exc:
                found = problems_of(exc, section)
        problems += found
        sound = sound and not found
    if sound:
        try:
            msgspec.convert(values, Settings, strict=False)
        except msgspec.ValidationError as exc:
            problems += problems_of(exc)
    return problems
