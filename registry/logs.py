"""structlog set-up: JSON lines off a terminal, readable console output on one."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(*, level: str = "info", fmt: str = "auto") -> None:
    console = sys.stderr.isatty() if fmt == "auto" else fmt == "console"
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    # aiohttp's own loggers (access log when enabled, server errors) go to stderr as well.
    logging.basicConfig(level=numeric_level, stream=sys.stderr, format="%(message)s")
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
        if console
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _TRACEBACKS if not console else _passthrough,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


# Tracebacks as data, without the frames' local variables: those hold whole request bodies
# (a peer's batch items, a client's document), which would be logged with every error.
_TRACEBACKS = structlog.processors.ExceptionRenderer(
    structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
)


def _passthrough(
    logger: object, method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    return event
