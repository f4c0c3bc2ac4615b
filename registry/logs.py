"""structlog set-up: JSON lines off a terminal, readable console output on one.

aiohttp's own loggers (its server's errors, the access log when enabled) write through the
standard library: their records are rendered by the same processors, so every line is JSON
off a terminal. A client's request body that cannot be decoded and that no handler read is
aiohttp's to drain after the answer; it logs that as an unhandled exception, which is not a
fault of this server: those records are left out.
"""

from __future__ import annotations

import logging
import sys

import structlog
from aiohttp.web_protocol import RequestPayloadError


def configure(*, level: str = "info", fmt: str = "auto") -> None:
    console = sys.stderr.isatty() if fmt == "auto" else fmt == "console"
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
        if console
        else structlog.processors.JSONRenderer()
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                _TRACEBACKS if not console else _passthrough,
                renderer,
            ],
        )
    )
    handler.addFilter(_undrained_client_body)
    logging.basicConfig(level=numeric_level, handlers=[handler], force=True)
    structlog.configure(
        processors=[*shared, _TRACEBACKS if not console else _passthrough, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


# Tracebacks as data, without the frames' local variables: those hold whole request bodies
# (a peer's batch items, a client's document), which would be logged with every error.
_TRACEBACKS = structlog.processors.ExceptionRenderer(
    structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
)


def _undrained_client_body(record: logging.LogRecord) -> bool:
    """False for aiohttp's record of a client's body it could not decode while draining it."""
    error = record.exc_info[1] if record.exc_info else None
    return not isinstance(error, RequestPayloadError)


def _passthrough(
    logger: object, method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    return event
