"""Settings: layers, types, and refusals that name their key."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.__main__ import DEFAULT_CONFIG
from registry.settings import Settings, SettingsError


def test_default_toml_is_the_built_in_default():
    """config/default.toml states exactly the built-in values, key for key."""
    assert Settings() == Settings.load(DEFAULT_CONFIG)


def test_layers_win_in_order(tmp_path: Path):
    """TOML beats defaults, the environment beats TOML, flags beat everything."""
    config = tmp_path / "r.toml"
    config.write_text('port = 9000\neviction_interval = 2\nlog_format = "json"\n')
    settings = Settings.load(
        config,
        {"REGISTRY_PORT": "9100", "REGISTRY_DISABLE_DELTA": "true", "HOME": "/root"},
        port=9200,
        host=None,
    )
    assert (9200, 2.0, "json", True, "127.0.0.1") == (
        settings.port,
        settings.eviction_interval,
        settings.log_format,
        settings.disable_delta,
        settings.host,
    )


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"REGISTRY_PORT": "eighty"}, "port: 'eighty' is not a valid int"),
        ({"REGISTRY_PORT": "0"}, "port: 0 is not a TCP port"),
        ({"REGISTRY_EVICTION_INTERVAL": "-1"}, "eviction_interval: must be positive"),
        ({"REGISTRY_RENEWAL_WINDOW": "0"}, "renewal_window: must be positive"),
        ({"REGISTRY_LEGACY_LEASE_EXPIRY": "sometimes"}, "legacy_lease_expiry: 'sometimes'"),
        ({"REGISTRY_NO_SUCH_THING": "1"}, "no_such_thing: unknown setting"),
        ({"REGISTRY_LOG_FORMAT": "xml"}, "log_format: 'xml' is not one of"),
    ],
)
def test_bad_values_fail_naming_their_key(environ: dict[str, str], message: str):
    """A bad value stops start-up with its key in the message."""
    with pytest.raises(SettingsError, match=message):
        Settings.load(None, environ)


def test_unknown_toml_key_is_refused(tmp_path: Path):
    """A typo in the settings file is an error, not silently ignored."""
    config = tmp_path / "r.toml"
    config.write_text("evction_interval = 5\n")
    with pytest.raises(SettingsError, match="evction_interval: unknown setting"):
        Settings.load(config)


def test_unreadable_toml_names_the_file(tmp_path: Path):
    """A file that is not TOML is reported with its path."""
    config = tmp_path / "r.toml"
    config.write_text("port = \n")
    with pytest.raises(SettingsError, match=str(config)):
        Settings.load(config)


SECURED = {
    "client_credentials": ("svc:pw",),
    "admin_credentials": ("ops:pw",),
}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "registry.internal"])
def test_a_public_bind_needs_credentials_or_the_insecure_setting(host: str):
    with pytest.raises(SettingsError, match="client_credentials and admin_credentials"):
        Settings(host=host)
    with pytest.raises(SettingsError, match="admin_credentials"):
        Settings(host=host, client_credentials=("svc:pw",))
    assert Settings(host=host, **SECURED).secured
    assert not Settings(host=host, insecure_public_bind=True).secured


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_needs_no_credentials(host: str):
    assert not Settings(host=host).secured


def test_secured_peers_need_the_peer_credential():
    peers = ("http://10.0.0.2:8761/eureka/",)
    with pytest.raises(SettingsError, match="peer_credential: needed"):
        Settings(peers=peers, **SECURED)
    with pytest.raises(SettingsError, match="peer_credential"):
        Settings(host="0.0.0.0", peers=peers, insecure_public_bind=False, **SECURED)
    Settings(peers=peers, peer_credential="cluster:pw", **SECURED)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"client_credentials": ("nopassword",)}, "client_credentials: each credential"),
        ({"admin_credentials": (":pw",)}, "admin_credentials: each credential"),
        ({"peer_credential": "user:"}, "peer_credential: each credential"),
        ({"admin_tokens": ("two words",)}, "admin_tokens: a token"),
        ({"peers": ("http://u:secret@10.0.0.2/eureka/",)}, "must not carry credentials"),
    ],
)
def test_malformed_credentials_are_refused_without_showing_them(values, message: str):
    with pytest.raises(SettingsError, match=message) as refused:
        Settings(**values)
    assert "secret" not in str(refused.value) and "nopassword" not in str(refused.value)


def test_credentials_come_from_the_environment_as_lists():
    settings = Settings.load(
        None,
        {
            "REGISTRY_CLIENT_CREDENTIALS": "a:1, b:2",
            "REGISTRY_ADMIN_TOKENS": "t1",
            "REGISTRY_PEER_CREDENTIAL": "p:3",
        },
    )
    assert (("a:1", "b:2"), ("t1",), "p:3") == (
        settings.client_credentials,
        settings.admin_tokens,
        settings.peer_credential,
    )
    assert "a:1" not in repr(settings) and "p:3" not in repr(settings)


def test_peers_are_one_each_with_or_without_the_trailing_slash():
    settings = Settings.load(None, {}, peers="http://a:8761/eureka, http://a:8761/eureka/")
    assert ("http://a:8761/eureka/",) == settings.peers


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
def test_kubernetes_service_links_are_named_for_what_they_are(key: str, value: str):
    """A Service named `registry` (or `registry-...`) puts REGISTRY_* variables in every pod of
    its namespace: the refusal says so, and how to turn them off, rather than call them
    unknown settings."""
    with pytest.raises(SettingsError, match=f"{key}: .*enableServiceLinks: false"):
        Settings.load(None, {key: value})
