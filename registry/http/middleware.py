"""Every error leaves as a JSON body `{"error": ..., "detail": ...}` with its status.

RegistryError subclasses map to statuses through one table, walked along the class's MRO;
aiohttp's own errors (404 no route, 405, 413 body too large) get the same shape; anything else
is a bug: logged with its traceback and answered 500.
"""

from __future__ import annotations

from typing import Any

import orjson
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from registry import errors

log = structlog.get_logger()

STATUS_FOR: dict[type, int] = {
    errors.RegistryError: 500,
    errors.BadInput: 400,
    errors.UnsupportedMediaType: 415,
    errors.UnknownInstance: 404,
    errors.UnknownApplication: 404,
    errors.NotServed: 403,
    errors.StaleReplica: 409,
}

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


def status_for(exc: errors.RegistryError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS_FOR:
            return STATUS_FOR[cls]
    return 500


def error_response(status: int, error: str, detail: str, **extra: Any) -> web.Response:
    body = {"error": error, "detail": detail, **extra}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except errors.BadInput as exc:
        return error_response(status_for(exc), exc.code, exc.detail, field=exc.field)
    except errors.RegistryError as exc:
        status = status_for(exc)
        if status == 500:
            log.exception("request_failed", method=request.method, path=request.path)
        return error_response(status, exc.code, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = error_response(
            exc.status, _HTTP_CODES.get(exc.status, f"http_{exc.status}"), _detail(request, exc)
        )
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except Exception:
        log.exception("request_failed", method=request.method, path=request.path)
        return error_response(500, "internal_error", "unexpected error; see the server log")


def _detail(request: web.Request, exc: web.HTTPException) -> str:
    if exc.status == 404:
        return f"no endpoint at {request.method} {request.path}"
    if exc.status == 405:
        return f"{request.method} is not allowed here; allowed: {exc.headers.get('Allow', '')}"
    if exc.status == 413:
        return f"the request body is larger than {request.client_max_size} bytes"
    return exc.reason
