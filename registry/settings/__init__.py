"""Settings: one frozen object of sections, read once at start-up.

Rooms: `sections` holds the ten sections (`[server]`, `[credentials]`, `[leases]`,
`[self_preservation]`, `[reads]`, `[peers]`, `[checks]`, `[store]`, `[limits]`, `[logging]`),
each a msgspec struct whose types refuse bad values; `values` the checks types cannot say;
`model` the `Settings` holding one of each, the rules between them, and `Settings.of`;
`layers` reads the defaults, a TOML file, `REGISTRY_<SECTION>__<KEY>` variables and flags, later
ones winning, into `Loaded` (the settings, where each value came from, deprecated names used);
`renamed` maps the flat names of before to their sections; `show` writes the settings in
effect; `errors` names each problem by section and key.
"""

from __future__ import annotations

from registry.settings.errors import SettingsError
from registry.settings.layers import (
    ENV_PREFIX,
    Deprecation,
    Loaded,
    Source,
    env_name,
    load_settings,
)
from registry.settings.model import KEYS, SEPARATOR, Settings
from registry.settings.renamed import RENAMED
from registry.settings.sections import (
    SECTIONS,
    CheckSettings,
    CredentialSettings,
    LeaseSettings,
    LimitSettings,
    LogSettings,
    PeerSettings,
    ReadSettings,
    SelfPreservationSettings,
    ServerSettings,
    StoreSettings,
)
from registry.settings.values import (
    MAX_BATCH_ITEMS,
    MINUTES,
    SECONDS,
    client_applications,
    client_vip_addresses,
    is_loopback,
    nameserver,
    peer_url_problem,
)

__all__ = [
    "ENV_PREFIX",
    "KEYS",
    "MAX_BATCH_ITEMS",
    "MINUTES",
    "RENAMED",
    "SECONDS",
    "SECTIONS",
    "SEPARATOR",
    "CheckSettings",
    "CredentialSettings",
    "Deprecation",
    "LeaseSettings",
    "LimitSettings",
    "Loaded",
    "LogSettings",
    "PeerSettings",
    "ReadSettings",
    "SelfPreservationSettings",
    "ServerSettings",
    "Settings",
    "SettingsError",
    "Source",
    "StoreSettings",
    "client_applications",
    "client_vip_addresses",
    "env_name",
    "is_loopback",
    "load_settings",
    "nameserver",
    "peer_url_problem",
]
