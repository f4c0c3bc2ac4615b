"""`python -m registry config check FILE` and `python -m registry config show [--config FILE]
[--host H] [--port P] [--peers URL[,URL...]]`, and the flags `serve` shares with `show`.

`check` reads a settings file on its own (the defaults beneath it, no environment): `ok`, exit
0; or every problem found, one a line naming its section and key, exit 2. Deprecated flat names
are listed as warnings and leave the exit at 0. `show` loads what `serve` would (the file, the
environment, the flags) and prints the settings in effect by section, each value with where it
came from; secrets show as "****".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from registry.settings import Loaded, SettingsError, Source, load_settings
from registry.settings.show import render

# The embedded single-node default, read when no --config is given.
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "default.toml"


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that say where settings come from: `serve`'s, and `config show`'s."""
    parser.add_argument("--config", type=Path, help="a TOML settings file")
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8761)")
    parser.add_argument(
        "--peers", help="other nodes' base URLs, comma-separated (http://host:8761/eureka/)"
    )


def config_file(args: argparse.Namespace) -> Path | None:
    """The settings file to read: --config, or the embedded default when it is there."""
    config: Path | None = args.config
    return config or (DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None)


def flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags as settings, named `section__key` (None: not given)."""
    return {"server__host": args.host, "server__port": args.port, "peers__urls": args.peers}


def load(args: argparse.Namespace, environ: Mapping[str, str]) -> Loaded:
    """What `serve` runs with: the file, then the environment, then the flags."""
    return load_settings(config_file(args), environ, **flags(args))


def add_commands(commands: Any) -> None:
    """`config check` and `config show`, on the `python -m registry` parser's subparsers."""
    config = commands.add_parser("config", help="check a settings file, or show the settings")
    actions = config.add_subparsers(dest="action", required=True)
    check = actions.add_parser(
        "check", help="validate a TOML settings file: every problem, by section and key"
    )
    check.add_argument("file", type=Path)
    show = actions.add_parser(
        "show", help="the settings in effect by section, each with where it came from"
    )
    add_source_arguments(show)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    if args.action == "check":
        return _check(args.file)
    return _show(args, environ)


def _check(path: Path) -> int:
    try:
        loaded = load_settings(path, {})
    except SettingsError as exc:
        for problem in exc.problems:
            print(problem)
        for warning in exc.warnings:
            print(f"warning: {warning}")
        count = len(exc.problems)
        print(f"{path}: {count} problem{'' if count == 1 else 's'}")
        return 2
    for deprecation in loaded.deprecations:
        print(f"warning: {deprecation}")
    count = len(loaded.deprecations)
    deprecated = f", with {count} deprecated name{'' if count == 1 else 's'}" if count else ""
    print(f"{path}: ok{deprecated}")
    return 0


def _show(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        loaded = load(args, environ)
    except SettingsError as exc:
        print(refusal(exc), file=sys.stderr)
        return 2
    for deprecation in loaded.deprecations:
        print(f"warning: {deprecation}", file=sys.stderr)
    path = loaded.path

    def label(source: Source) -> str:  # the embedded default file holds the defaults
        default = source is Source.FILE and path == DEFAULT_CONFIG
        return Source.DEFAULT.value if default else source.value

    read = f"{path}, " if path is not None and path != DEFAULT_CONFIG else ""
    print(f"# The settings in effect: the defaults, {read}the environment, the flags.")
    print(render(loaded, label), end="")
    return 0


def refusal(exc: SettingsError) -> str:
    """What a command that cannot load its settings says: each problem, then each deprecated
    name used."""
    problems = exc.problems
    said = f" {problems[0]}" if len(problems) == 1 else "".join(f"\n  {p}" for p in problems)
    warnings = "".join(f"\nservice-registry: warning: {w}" for w in exc.warnings)
    return f"service-registry: bad settings:{said}{warnings}"
