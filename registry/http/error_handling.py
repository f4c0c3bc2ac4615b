"""Every error leaves as a JSON body `{"error": ..., "detail": ...}` with its status.

RegistryError subclasses map to statuses through one table, walked along the class's MRO:
refusals by the checks before a handler (401, 403, 429) too. aiohttp's own errors get the
same shape, as do requests no route matches (404) or no route of that path accepts (405);
anything else is a bug: logged with its traceback and answered 500.

`registry.http.answering` calls `error_answer` around each route's handler, rather than an
application middleware: a middleware also costs aiohttp's own per-request wrapper, about 7 %
of a heartbeat's time.
"""

from __future__ import annotations

from typing import Any

import orjson
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from registry import errors
from registry.codec import encode_instance
from registry.core.conflicts import RemovedHere, StaleReplica
from registry.http.negotiation import payload, response_format

log = structlog.get_logger()

STATUS_FOR: dict[type, int] = {
    errors.RegistryError: 500,
    errors.BadInput: 400,
    errors.UnsupportedMediaType: 415,
    errors.BodyTooLarge: 413,
    errors.BodyTooSlow: 408,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    errors.TooManyRequests: 429,
    errors.UnknownInstance: 404,
    errors.UnknownApplication: 404,
    errors.AmbiguousInstance: 409,
    errors.NotServed: 403,
    StaleReplica: 409,
    errors.LimitReached: 403,
    errors.MemoryFull: 503,
    RemovedHere: 409,
    errors.IndexExpired: 410,
    errors.StoreUnavailable: 503,
}

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def status_for(exc: errors.RegistryError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS_FOR:
            return STATUS_FOR[cls]
    return 500


def error_response(status: int, error: str, detail: str, **extra: Any) -> web.Response:
    body = {"error": error, "detail": detail, **extra}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def error_answer(request: web.Request, exc: Exception) -> web.Response:
    """The JSON answer to what a handler (or a check before it) raised. An HTTPException
    below 400 (a redirect) is no error: raised again."""
    if isinstance(exc, StaleReplica):
        # A peer holds older data than ours: the 409 carries our copy, for it to adopt.
        fmt = response_format(request)
        return payload(request, fmt, encode_instance(fmt, exc.lease), status=409)
    if isinstance(exc, errors.BadInput):
        return error_response(status_for(exc), exc.code, exc.detail, field=exc.field)
    if isinstance(exc, errors.RegistryError):
        status = status_for(exc)
        if status == 500:
            log.exception("request_failed", method=request.method, path=request.path)
        response = error_response(status, exc.code, str(exc))
        for name, value in exc.headers:
            response.headers.add(name, value)
        return response
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        code = _HTTP_CODES.get(exc.status, f"http_{exc.status}")
        return error_response(exc.status, code, exc.reason)
    log.exception("request_failed", method=request.method, path=request.path)
    return error_response(500, "internal_error", "unexpected error; see the server log")


async def no_such_endpoint(request: web.Request) -> web.Response:
    """The catch-all route: nothing here."""
    return error_response(404, "not_found", f"no endpoint at {request.method} {request.path}")


def method_not_allowed(allowed: list[str]) -> Handler:
    """The handler for every other method of a path that has routes for `allowed`."""
    allow = ", ".join(sorted(allowed))

    async def handler(request: web.Request) -> web.Response:
        response = error_response(
            405, "method_not_allowed", f"{request.method} is not allowed here; allowed: {allow}"
        )
        response.headers["Allow"] = allow
        return response

    return handler
