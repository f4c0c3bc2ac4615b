"""`python -m registry serve [--config FILE] [--host H] [--port P] [--peers URL[,URL...]]`;
`config check FILE` and `config show` (registry/config_cli.py); and the admin commands against a
running server: apps, instances, out-of-service, in-service, explain, status
(`python -m registry COMMAND --help`).

SIGHUP re-reads the same sources (file, environment, flags) and applies the peer list.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

import structlog

from registry import admin_cli, config_cli, serving
from registry.app import create_app
from registry.config_cli import DEFAULT_CONFIG
from registry.logs import configure
from registry.settings import Loaded, Settings, SettingsError
from registry.store.lock import DataDirInUse
from registry.store.sqlite import CorruptStore, NewerSchema

__all__ = ["DEFAULT_CONFIG", "main"]
# Connections the kernel queues before the server accepts them (aiohttp: 128). A fleet that
# reconnects at once after a restart or a network blip would otherwise wait in SYN retries.
LISTEN_BACKLOG = 4096


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (the `fast` extra), asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """`uvloop` or `asyncio`: which implementation `loop` comes from."""
    return type(loop).__module__.split(".")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="service-registry", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    config_cli.add_source_arguments(commands.add_parser("serve", help="run the registry server"))
    config_cli.add_commands(commands)
    admin_cli.add_commands(commands)
    args = parser.parse_args(argv)
    environ = dict(os.environ)
    if args.command == "config":
        return config_cli.run(args, environ)
    if args.command != "serve":
        return admin_cli.run(args)

    try:
        loaded = config_cli.load(args, environ)
    except SettingsError as exc:
        print(config_cli.refusal(exc), file=sys.stderr)
        return 2
    settings = loaded.settings
    configure(level=settings.logging.level, fmt=settings.logging.format)
    log = structlog.get_logger()
    _warn_deprecated(loaded)

    def reload() -> Settings:
        """SIGHUP: the same sources read again, and the deprecated names they use told."""
        again = config_cli.load(args, environ)
        _warn_deprecated(again)
        return again.settings

    missing = settings.missing_credentials()
    app = create_app(settings, reload=reload)
    access_log = logging.getLogger("aiohttp.access") if settings.logging.access_log else None
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            log.info(
                "server_starting",
                host=settings.server.host,
                port=settings.server.port,
                config=str(loaded.path),
                peers=list(settings.peers.urls),
                loop=loop_name(runner.get_loop()),
                credentials="by plane" if settings.secured else "none (loopback only)",
            )
            if settings.server.insecure_public_bind and missing:
                log.warning(
                    "serving_without_credentials", host=settings.server.host, missing=missing
                )
            runner.run(
                serving.serve(
                    app,
                    host=settings.server.host,
                    port=settings.server.port,
                    backlog=LISTEN_BACKLOG,
                    access_log=access_log,
                )
            )
    except (NewerSchema, CorruptStore, DataDirInUse) as exc:
        log.error("store_refused", detail=str(exc))
        print(f"service-registry: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the address is taken, or not this host's
        log.error(
            "server_failed",
            host=settings.server.host,
            port=settings.server.port,
            detail=str(exc),
        )
        print(f"service-registry: {exc}", file=sys.stderr)
        return 1
    log.info("server_stopped")
    return 0


def _warn_deprecated(loaded: Loaded) -> None:
    """One warning for each deprecated name the settings were given by."""
    log = structlog.get_logger()
    for deprecation in loaded.deprecations:
        log.warning(
            "setting_deprecated",
            setting=deprecation.old,
            use=deprecation.new,
            source=deprecation.source.value,
            detail=str(deprecation),
        )


if __name__ == "__main__":
    sys.exit(main())
