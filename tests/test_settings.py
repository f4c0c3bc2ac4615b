"""Settings: sections, layers, types, and refusals that name their section and key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from registry.__main__ import DEFAULT_CONFIG
from registry.settings import (
    KEYS,
    RENAMED,
    CredentialSettings,
    LeaseSettings,
    ServerSettings,
    Settings,
    SettingsError,
    Source,
    load_settings,
)

FLAT_EXAMPLE = DEFAULT_CONFIG.parent / "examples" / "flat-deprecated.toml"


def write(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "r.toml"
    config.write_text(text)
    return config


def problems(config: Path | None, environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """What loading `config` and `environ` is refused for, a problem a line."""
    with pytest.raises(SettingsError) as refused:
        load_settings(config, environ)
    return refused.value.problems


class TestFiles:
    def test_default_toml_is_the_built_in_default(self):
        """config/default.toml states exactly the built-in values, key for key."""
        assert Settings() == load_settings(DEFAULT_CONFIG).settings

    def test_default_toml_states_every_setting_by_section(self):
        """Every key of every section is in the file, under its section, and nothing flat."""
        written = tomllib.loads(DEFAULT_CONFIG.read_text())
        assert {name: set(keys) for name, keys in KEYS.items()} == {
            name: set(keys) for name, keys in written.items()
        }

    def test_the_flat_example_loads_as_the_default_with_warnings(self):
        """config/examples/flat-deprecated.toml (the file before sections) loads to the same
        settings, each flat key read as its new name with a warning naming it."""
        loaded = load_settings(FLAT_EXAMPLE)
        assert Settings() == loaded.settings
        flat = tomllib.loads(FLAT_EXAMPLE.read_text())
        assert [
            f"{name} is deprecated: use [{RENAMED[name][0]}] {RENAMED[name][1]}" for name in flat
        ] == [str(d) for d in loaded.deprecations]
        assert {Source.FILE} == {d.source for d in loaded.deprecations}

    def test_unknown_keys_and_sections_are_refused(self, tmp_path: Path):
        """A typo in the settings file is an error, not silently ignored: a key in a section,
        a key at the top, a section."""
        config = write(tmp_path, "evction_interval = 5\n[leases]\nevction_interval = 5\n[tls]\n")
        assert (
            "evction_interval: unknown setting",
            "leases.evction_interval: unknown setting",
            "tls: unknown section [tls]",
        ) == problems(config)

    def test_a_section_given_as_a_value_is_refused(self, tmp_path: Path):
        with pytest.raises(SettingsError, match=r"leases: a section \(\[leases\]\), not a setting"):
            load_settings(write(tmp_path, "leases = 5\n"))

    def test_unreadable_toml_names_the_file(self, tmp_path: Path):
        """A file that is not TOML is reported with its path."""
        config = write(tmp_path, "port = \n")
        with pytest.raises(SettingsError, match=str(config)):
            load_settings(config)


class TestLayers:
    def test_layers_win_in_order(self, tmp_path: Path):
        """TOML beats defaults, the environment beats TOML, flags beat everything."""
        config = write(
            tmp_path,
            '[server]\nport = 9000\n[leases]\neviction_interval = 2\n[logging]\nformat = "json"\n',
        )
        environ = {
            "REGISTRY_SERVER__PORT": "9100",
            "REGISTRY_READS__DISABLE_DELTA": "true",
            "HOME": "/root",
        }
        settings = load_settings(config, environ, server__port=9200, server__host=None).settings
        assert (9200, 2.0, "json", True, "127.0.0.1") == (
            settings.server.port,
            settings.leases.eviction_interval,
            settings.logging.format,
            settings.reads.disable_delta,
            settings.server.host,
        )

    def test_each_value_says_where_it_came_from(self, tmp_path: Path):
        config = write(tmp_path, "[server]\nport = 9000\n[leases]\neviction_interval = 2\n")
        loaded = load_settings(
            config, {"REGISTRY_LEASES__EVICTION_INTERVAL": "3"}, server__port=9200
        )
        assert (Source.FLAG, Source.ENVIRONMENT, Source.DEFAULT) == (
            loaded.source("server", "port"),
            loaded.source("leases", "eviction_interval"),
            loaded.source("server", "host"),
        )
        assert config == loaded.path

    def test_lists_come_from_the_environment_comma_separated(self):
        settings = load_settings(
            None,
            {
                "REGISTRY_CREDENTIALS__CLIENTS": "a:1, b:2",
                "REGISTRY_CREDENTIALS__ADMIN_TOKENS": "t1",
                "REGISTRY_CREDENTIALS__PEER": "p:3",
            },
        ).settings
        assert (("a:1", "b:2"), ("t1",), "p:3") == (
            settings.credentials.clients,
            settings.credentials.admin_tokens,
            settings.credentials.peer,
        )
        assert "a:1" not in repr(settings) and "p:3" not in repr(settings)

    @pytest.mark.parametrize(("text", "value"), [("yes", True), ("No", False), ("1", True)])
    def test_booleans_from_the_environment(self, text: str, value: bool):
        environ = {"REGISTRY_LEASES__LEGACY_EXPIRY": text}
        assert value is load_settings(None, environ).settings.leases.legacy_expiry

    def test_peers_are_one_each_with_or_without_the_trailing_slash(self):
        settings = load_settings(
            None, {}, peers__urls="http://a:8761/eureka, http://a:8761/eureka/"
        ).settings
        assert ("http://a:8761/eureka/",) == settings.peers.urls

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("REGISTRY_PORT", "tcp://10.96.0.12:8761"),
            ("REGISTRY_SERVICE_HOST", "10.96.0.12"),
            ("REGISTRY_SERVICE_PORT_HTTP", "8761"),
            ("REGISTRY_PORT_8761_TCP_ADDR", "10.96.0.12"),
            ("REGISTRY_UI_SERVICE_HOST", "10.96.0.13"),  # a Service named registry-ui
            ("REGISTRY_UI_PORT", "tcp://10.96.0.13:80"),
        ],
    )
    def test_kubernetes_service_links_are_named_for_what_they_are(self, key: str, value: str):
        """A Service named `registry` (or `registry-...`) puts REGISTRY_* variables in every
        pod of its namespace: the refusal says so, and how to turn them off, rather than call
        them unknown settings."""
        with pytest.raises(SettingsError, match=f"{key}: .*enableServiceLinks: false"):
            load_settings(None, {key: value})


class TestRefusals:
    @pytest.mark.parametrize(
        ("environ", "message"),
        [
            ({"REGISTRY_SERVER__PORT": "eighty"}, "server.port: Expected int, got str"),
            ({"REGISTRY_SERVER__PORT": "0"}, "server.port: Expected int >= 1"),
            (
                {"REGISTRY_LEASES__EVICTION_INTERVAL": "-1"},
                r"leases.eviction_interval: Expected float > 0.0 \(given '-1'\)",
            ),
            (
                {"REGISTRY_SELF_PRESERVATION__RENEWAL_WINDOW": "0"},
                "self_preservation.renewal_window: Expected float > 0",
            ),
            (
                {"REGISTRY_LEASES__LEGACY_EXPIRY": "sometimes"},
                "leases.legacy_expiry: Expected bool",
            ),
            ({"REGISTRY_NO_SUCH_THING": "1"}, r"no_such_thing: unknown setting \(REGISTRY_NO"),
            ({"REGISTRY_LEASES__NO_SUCH": "1"}, "leases.no_such: unknown setting"),
            ({"REGISTRY_NOWHERE__PORT": "1"}, "nowhere.port: unknown setting"),
            ({"REGISTRY_LOGGING__FORMAT": "xml"}, "logging.format: Invalid enum value 'xml'"),
            ({"REGISTRY_PEERS__BATCH_SIZE": "1001"}, "peers.batch_size: Expected int <= 1000"),
            (
                {"REGISTRY_LEASES__CLIENT_CLOCK_SKEW": "301"},
                "leases.client_clock_skew: at most max_clock_skew",
            ),
            ({"REGISTRY_CHECKS__NETWORKS": "10.0.0.0/33"}, "checks.networks: '10.0.0.0/33'"),
            ({"REGISTRY_SERVER__TRUSTED_PROXIES": "proxy"}, "server.trusted_proxies: 'proxy'"),
        ],
    )
    def test_bad_values_fail_naming_their_section_and_key(self, environ, message: str):
        """A bad value stops start-up with its section and key in the message."""
        with pytest.raises(SettingsError, match=message):
            load_settings(None, environ)

    def test_every_problem_is_told_not_only_the_first(self, tmp_path: Path):
        config = write(
            tmp_path,
            "[server]\nport = 0\n[leases]\neviction_interval = -1\nmax_clock_skew = 10\n"
            "client_clock_skew = 20\n[credentials]\nclients = ['nopassword']\n",
        )
        assert (
            "server.port: Expected int >= 1",
            "leases.eviction_interval: Expected float > 0.0",
            "credentials.clients: each credential is `user:password`, both non-empty",
        ) == problems(config)

    def test_direct_construction_is_checked_too(self):
        """msgspec checks constraints when it converts; Settings checks its sections again when
        built directly, and refuses what its sections break together."""
        with pytest.raises(SettingsError, match=r"leases.eviction_interval: Expected float > 0"):
            Settings(leases=LeaseSettings(eviction_interval=-1))
        with pytest.raises(SettingsError, match=r"leases.removal_margin: at most max_clock_skew"):
            LeaseSettings(removal_margin=400)

    def test_settings_of_names_sections_and_keys(self):
        assert 5.0 == Settings.of(leases__eviction_interval="5").leases.eviction_interval
        with pytest.raises(SettingsError, match=r"eviction_interval: unknown setting"):
            Settings.of(eviction_interval=5)

    def test_replace_checks_again(self):
        settings = Settings.of(store__enabled=False)
        assert (False, True) == (
            settings.replace(checks__loopback=True).store.enabled,
            settings.replace(checks__loopback=True).checks.loopback,
        )
        with pytest.raises(SettingsError, match=r"limits.fetch_burst: Expected int >= 1"):
            settings.replace(limits__fetch_burst=0)


SECURED = CredentialSettings(clients=("svc:pw",), admins=("ops:pw",))


class TestCredentials:
    @pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "registry.internal"])
    def test_a_public_bind_needs_credentials_or_the_insecure_setting(self, host: str):
        with pytest.raises(
            SettingsError, match=r"credentials.clients and credentials.admins .* are not set"
        ):
            Settings(server=ServerSettings(host=host))
        with pytest.raises(SettingsError, match=r"credentials.admins"):
            Settings.of(server__host=host, credentials__clients=("svc:pw",))
        assert Settings(server=ServerSettings(host=host), credentials=SECURED).secured
        assert not Settings.of(server__host=host, server__insecure_public_bind=True).secured

    @pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
    def test_loopback_needs_no_credentials(self, host: str):
        assert not Settings.of(server__host=host).secured

    def test_secured_peers_need_the_peer_credential(self):
        peers = ("http://10.0.0.2:8761/eureka/",)
        with pytest.raises(SettingsError, match=r"credentials.peer: needed"):
            Settings.of(peers__urls=peers, credentials__clients=("svc:pw",))
        with pytest.raises(SettingsError, match=r"credentials.peer"):
            Settings.of(server__host="0.0.0.0", peers__urls=peers, credentials__admins=("a:b",))
        Settings.of(
            peers__urls=peers,
            credentials__clients=("svc:pw",),
            credentials__admins=("ops:pw",),
            credentials__peer="cluster:pw",
        )

    @pytest.mark.parametrize(
        ("values", "message"),
        [
            ({"credentials__clients": ("nopassword",)}, "credentials.clients: each credential"),
            ({"credentials__admins": (":pw",)}, "credentials.admins: each credential"),
            ({"credentials__peer": "user:"}, "credentials.peer: each credential"),
            ({"credentials__admin_tokens": ("two words",)}, "credentials.admin_tokens: a token"),
            ({"credentials__peer": 12345}, "credentials.peer: Expected str, got int"),
            (
                {"peers__urls": ("http://u:secret@10.0.0.2/eureka/",)},
                "peers.urls: .* must not carry credentials",
            ),
        ],
    )
    def test_malformed_credentials_are_refused_without_showing_them(self, values, message: str):
        with pytest.raises(SettingsError, match=message) as refused:
            Settings.of(**values)
        shown = str(refused.value)
        assert all(secret not in shown for secret in ("secret", "nopassword", "12345"))

    def test_secrets_stay_out_of_repr(self):
        credentials = Settings.of(credentials__peer="p:hidden-pw").credentials
        assert "hidden-pw" not in repr(credentials) and "peer=****" in repr(credentials)


class TestDeprecatedNames:
    @pytest.mark.parametrize(
        ("text", "environ", "warnings", "source"),
        [
            (
                None,
                {"REGISTRY_PORT": "9000", "REGISTRY_PEER_DNS": "peers.test"},
                [
                    "REGISTRY_PORT is deprecated: use REGISTRY_SERVER__PORT",
                    "REGISTRY_PEER_DNS is deprecated: use REGISTRY_PEERS__DNS_NAME",
                ],
                Source.ENVIRONMENT,
            ),
            (
                'port = 9000\npeer_dns = "peers.test"\n',
                {},
                [
                    "port is deprecated: use [server] port",
                    "peer_dns is deprecated: use [peers] dns_name",
                ],
                Source.FILE,
            ),
        ],
        ids=["environment", "file"],
    )
    def test_a_flat_name_is_read_as_its_new_name_with_a_warning(
        self, tmp_path: Path, text, environ, warnings: list[str], source: Source
    ):
        loaded = load_settings(text and write(tmp_path, text), environ)
        assert (9000, "peers.test") == (
            loaded.settings.server.port,
            loaded.settings.peers.dns_name,
        )
        assert warnings == [str(d) for d in loaded.deprecations]
        assert {source} == {d.source for d in loaded.deprecations}
        assert source is loaded.source("server", "port")

    @pytest.mark.parametrize(
        ("old", "new"),
        [
            ('peers = ["http://a:1/eureka"]', '[peers]\nurls = ["http://a:1/eureka"]'),
            ("store = false", "[store]\nenabled = false"),
            ("self_preservation = false", "[self_preservation]\nenabled = false"),
        ],
    )
    def test_a_flat_value_and_a_section_of_one_name_are_told_apart_by_type(
        self, tmp_path: Path, old: str, new: str
    ):
        """A flat `peers` is a list, `store` and `self_preservation` booleans; their sections
        are tables."""
        before = load_settings(write(tmp_path, old + "\n"))
        after = load_settings(write(tmp_path, new + "\n"))
        assert before.settings == after.settings != Settings()
        assert (1, 0) == (len(before.deprecations), len(after.deprecations))

    def test_given_both_ways_in_the_file_is_refused_naming_both(self, tmp_path: Path):
        config = write(tmp_path, "eviction_interval = 5\n[leases]\neviction_interval = 6\n")
        assert (
            "leases.eviction_interval: given twice, as eviction_interval (deprecated) and as "
            "[leases] eviction_interval; keep [leases] eviction_interval only",
        ) == problems(config)

    def test_given_both_ways_in_the_environment_is_refused_naming_both(self):
        with pytest.raises(SettingsError) as refused:
            load_settings(None, {"REGISTRY_SERVER__PORT": "1", "REGISTRY_PORT": "2"})
        assert (
            "server.port: given twice, as REGISTRY_PORT (deprecated) and as "
            "REGISTRY_SERVER__PORT; keep REGISTRY_SERVER__PORT only",
        ) == refused.value.problems
        assert ("REGISTRY_PORT is deprecated: use REGISTRY_SERVER__PORT",) == (
            refused.value.warnings
        )

    def test_given_both_ways_in_two_layers_the_later_wins(self, tmp_path: Path):
        config = write(tmp_path, "[server]\nport = 1\n")
        assert 2 == load_settings(config, {"REGISTRY_PORT": "2"}).settings.server.port
        assert 1 == load_settings(write(tmp_path, "port = 1\n"), {}).settings.server.port
