"""`python -m registry config check FILE` and `config show`, and the deprecated names a server
is started with, logged."""

from __future__ import annotations

import os
import signal
import tomllib
from pathlib import Path

import pytest

from registry.__main__ import DEFAULT_CONFIG, main
from registry.settings import KEYS, RENAMED, Settings
from tests.processes import ServerProcess, Servers, run

FLAT_EXAMPLE = DEFAULT_CONFIG.parent / "examples" / "flat-deprecated.toml"
FLAT_KEYS = list(tomllib.loads(FLAT_EXAMPLE.read_text()))  # read here: no blocking in a test


@pytest.fixture(autouse=True)
def _no_registry_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """`config show` reads the environment: the suite's own REGISTRY_* knobs are no settings."""
    for name in [n for n in os.environ if n.startswith("REGISTRY_")]:
        monkeypatch.delenv(name)


def write(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "r.toml"
    config.write_text(text)
    return config


class TestCheck:
    def test_a_sound_file_is_ok(self, capsys: pytest.CaptureFixture[str]):
        assert 0 == main(["config", "check", str(DEFAULT_CONFIG)])
        assert f"{DEFAULT_CONFIG}: ok\n" == capsys.readouterr().out

    def test_deprecated_names_are_warnings(self, capsys: pytest.CaptureFixture[str]):
        """The flat file of before passes, each flat key listed with its new place."""
        assert 0 == main(["config", "check", str(FLAT_EXAMPLE)])
        lines = capsys.readouterr().out.splitlines()
        assert [
            f"warning: {name} is deprecated: use [{RENAMED[name][0]}] {RENAMED[name][1]}"
            for name in FLAT_KEYS
        ] == lines[:-1]
        assert f"{FLAT_EXAMPLE}: ok, with {len(FLAT_KEYS)} deprecated names" == lines[-1]

    def test_every_problem_on_a_line_of_its_own(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ):
        config = write(
            tmp_path,
            "port = 0\n[leases]\neviction_interval = -1\nevction = 1\n"
            '[credentials]\nclients = ["svc:pw"]\nclient_applications = ["nobody=ORDERS"]\n'
            '[logging]\nformat = "xml"\n',
        )
        assert 2 == main(["config", "check", str(config)])
        assert [
            "leases.evction: unknown setting",
            "server.port: Expected int >= 1",
            "leases.eviction_interval: Expected float > 0.0",
            "credentials.client_applications: 'nobody' is the user of no client credential",
            "logging.format: Invalid enum value 'xml'",
            "warning: port is deprecated: use [server] port",
            f"{config}: 5 problems",
        ] == capsys.readouterr().out.splitlines()

    def test_a_file_that_is_not_toml(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
        config = write(tmp_path, "[server\n")
        assert 2 == main(["config", "check", str(config)])
        out = capsys.readouterr().out
        assert f"cannot read settings from {config}" in out and f"{config}: 1 problem\n" in out

    def test_the_environment_is_not_read(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ):
        """The file alone is checked: a bad variable of the shell running it is no concern."""
        monkeypatch.setenv("REGISTRY_SERVER__PORT", "eighty")
        assert 0 == main(["config", "check", str(write(tmp_path, "[server]\nport = 1\n"))])
        capsys.readouterr()

    async def test_as_a_command(self):
        """`python -m registry config check FILE`, a real process: exit 0 and ok."""
        done = await run("config", "check", str(DEFAULT_CONFIG))
        assert (0, f"{DEFAULT_CONFIG}: ok\n", "") == (done.returncode, done.stdout, done.stderr)


class TestShow:
    def test_the_defaults_by_section(self, capsys: pytest.CaptureFixture[str]):
        """Every key under its section, as TOML reads it, each from the defaults."""
        assert 0 == main(["config", "show"])
        out = capsys.readouterr().out
        shown = tomllib.loads(out)
        defaults = Settings()
        assert {
            section: {key: _plain(getattr(getattr(defaults, section), key)) for key in keys}
            for section, keys in KEYS.items()
        } == shown
        values = [line for line in out.splitlines() if " = " in line]
        assert len(values) == sum(map(len, KEYS.values()))
        assert all(line.endswith("# default") for line in values)

    def test_each_value_says_where_it_came_from(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ):
        config = write(tmp_path, "[leases]\neviction_interval = 2\nmax_clock_skew = 60\n")
        monkeypatch.setenv("REGISTRY_LEASES__MAX_CLOCK_SKEW", "30")
        assert 0 == main(["config", "show", "--config", str(config), "--port", "9000"])
        lines = capsys.readouterr().out.splitlines()
        assert str(config) in lines[0]
        sources = dict(tuple(map(str.strip, line.split("#"))) for line in lines[1:] if "#" in line)
        assert ["flag", "file", "environment", "default"] == [
            sources[assignment]
            for assignment in (
                "port = 9000",
                "eviction_interval = 2.0",
                "max_clock_skew = 30.0",
                'host = "127.0.0.1"',
            )
        ]

    def test_secrets_are_masked_never_measured(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ):
        monkeypatch.setenv("REGISTRY_CREDENTIALS__CLIENTS", "svc:a-long-client-password,x:y")
        monkeypatch.setenv("REGISTRY_CREDENTIALS__PEER", "peer:p33r")
        assert 0 == main(["config", "show"])
        out = capsys.readouterr().out
        assert "p33r" not in out and "a-long-client-password" not in out and "svc" not in out
        shown = tomllib.loads(out)["credentials"]
        assert ("****", "****", [], []) == (
            shown["clients"],
            shown["peer"],
            shown["admins"],
            shown["admin_tokens"],
        )

    def test_deprecated_names_are_warned_of(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ):
        monkeypatch.setenv("REGISTRY_PORT", "9001")
        assert 0 == main(["config", "show"])
        out, err = capsys.readouterr()
        assert 9001 == tomllib.loads(out)["server"]["port"]
        assert "warning: REGISTRY_PORT is deprecated: use REGISTRY_SERVER__PORT\n" == err

    def test_bad_settings_exit_2(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ):
        monkeypatch.setenv("REGISTRY_SERVER__PORT", "eighty")
        monkeypatch.setenv("REGISTRY_LEASES__EVICTION_INTERVAL", "0")
        assert 2 == main(["config", "show"])
        assert [
            "service-registry: bad settings:",
            "  server.port: Expected int, got str (given 'eighty')",
            "  leases.eviction_interval: Expected float > 0.0 (given '0')",
        ] == capsys.readouterr().err.splitlines()


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.slow
class TestServe:
    @pytest.mark.parametrize("config", [DEFAULT_CONFIG, FLAT_EXAMPLE], ids=["sections", "flat"])
    async def test_the_run_command_serves_with_either_file(self, servers: Servers, config: Path):
        """`python -m registry serve` runs with either shape of the file; the flat one's names
        are logged (`setting_deprecated`), and again when SIGHUP reads the file again."""
        server = await servers.start(args=["--config", str(config)], logging__format="json")
        server.send_signal(signal.SIGHUP)
        await server.wait_logged("settings_reloaded")
        assert 0 == await server.stop()
        deprecated = [e for e in await server.log_lines() if e["event"] == "setting_deprecated"]
        flat = len(FLAT_KEYS) if config == FLAT_EXAMPLE else 0
        assert 2 * flat == len(deprecated)
        if flat:
            assert {
                "setting": "eviction_interval",
                "use": "[leases] eviction_interval",
                "source": "file",
                "detail": "eviction_interval is deprecated: use [leases] eviction_interval",
            }.items() <= next(e for e in deprecated if e["setting"] == "eviction_interval").items()

    async def test_a_flat_variable_is_read_and_logged(self, servers: Servers, tmp_path: Path):
        """REGISTRY_LOG_FORMAT (the name before sections) still sets the log's format, and is
        logged as deprecated, naming the variable to use."""
        server = ServerProcess(tmp_path / "flat.log", wrapper=["env", "REGISTRY_LOG_FORMAT=json"])
        servers.made.append(server)  # killed with the test's others, should it fail
        await server.start()
        assert 0 == await server.stop()
        assert [("REGISTRY_LOG_FORMAT", "REGISTRY_LOGGING__FORMAT", "environment")] == [
            (e["setting"], e["use"], e["source"])
            for e in await server.log_lines()  # JSON lines: the variable took effect
            if e["event"] == "setting_deprecated"
        ]
