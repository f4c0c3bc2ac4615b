"""`python -m registry serve [--config FILE] [--host H] [--port P] [--peers URL[,URL...]]`,
and the admin commands against a running server: apps, instances, out-of-service, in-service,
explain, status (`python -m registry COMMAND --help`).

SIGHUP re-reads the same sources (file, environment, flags) and applies the peer list.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

import structlog

from registry import admin_cli, serving
from registry.app import create_app
from registry.logs import configure
from registry.settings import Settings, SettingsError
from registry.store.lock import DataDirInUse
from registry.store.sqlite import CorruptStore, NewerSchema

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "default.toml"
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
    serve = commands.add_parser("serve", help="run the registry server")
    serve.add_argument("--config", type=Path, help="a TOML settings file")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8761)")
    serve.add_argument(
        "--peers", help="other nodes' base URLs, comma-separated (http://host:8761/eureka/)"
    )
    admin_cli.add_commands(commands)
    args = parser.parse_args(argv)
    if args.command != "serve":
        return admin_cli.run(args)

    config = args.config or (DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None)
    environ = dict(os.environ)

    def load() -> Settings:
        return Settings.load(config, environ, host=args.host, port=args.port, peers=args.peers)

    try:
        settings = load()
    except SettingsError as exc:
        print(f"service-registry: bad settings: {exc}", file=sys.stderr)
        return 2
    configure(level=settings.log_level, fmt=settings.log_format)
    log = structlog.get_logger()
    missing = settings.missing_credentials()
    app = create_app(settings, reload=load)
    access_log = logging.getLogger("aiohttp.access") if settings.access_log else None
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            log.info(
                "server_starting",
                host=settings.host,
                port=settings.port,
                config=str(config),
                peers=list(settings.peers),
                loop=loop_name(runner.get_loop()),
                credentials="by plane" if settings.secured else "none (loopback only)",
            )
            if settings.insecure_public_bind and missing:
                log.warning("serving_without_credentials", host=settings.host, missing=missing)
            runner.run(
                serving.serve(
                    app,
                    host=settings.host,
                    port=settings.port,
                    backlog=LISTEN_BACKLOG,
                    access_log=access_log,
                )
            )
    except (NewerSchema, CorruptStore, DataDirInUse) as exc:
        log.error("store_refused", detail=str(exc))
        print(f"service-registry: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the address is taken, or not this host's
        log.error("server_failed", host=settings.host, port=settings.port, detail=str(exc))
        print(f"service-registry: {exc}", file=sys.stderr)
        return 1
    log.info("server_stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
