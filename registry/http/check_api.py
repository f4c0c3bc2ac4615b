"""Admins' checks on applications (registry/core/app_checks.py), on the admin plane:

    GET    {base}checks           every application's check
    GET    {base}checks/{app}     one
    PUT    {base}checks/{app}     {"check": "http"|"tcp", "interval": 10, "timeout": 2,
                                   "path": "/health"}: every instance of the application is
                                   checked so, those registered later too; on disk before the
                                   answer, and sent to the peers
    DELETE {base}checks/{app}     instances go back to what their own metadata asks for

A check's answer says how it meets the application's instances as they are: how many it
checks, and those it cannot (no healthCheckUrl, a loopback address, ...) with why.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from registry.appkeys import CHECKER, CLOCK, REGISTRY, SETTINGS
from registry.checks.destinations import Destinations
from registry.checks.spec import app_check_from, check_spec
from registry.codec import json_codec
from registry.codec.checks import app_check_fields, check_app_name
from registry.core.app_checks import AppCheck
from registry.core.registry import Registry
from registry.errors import BadInput, UnknownApplication
from registry.http import auth, params
from registry.http.durability import committed
from registry.http.request_body import read_body

MAX_LISTED = 100  # instances a check's answer names as not checkable


async def checks(request: web.Request) -> web.Response:
    registry = request.app[REGISTRY]
    listed = sorted((app_check_fields(check) for check in registry.app_checks), key=_by_app)
    return _json({"checks": listed})


async def app_check(request: web.Request) -> web.Response:
    registry, app = request.app[REGISTRY], params.app_name(request)
    check = registry.app_checks.get(app)
    if check is None:
        raise UnknownApplication(f"no check is set on {app}")
    return _json(_answer(request, registry, check))


async def set_app_check(request: web.Request) -> web.Response:
    app, settings = params.app_name(request), request.app[SETTINGS]
    check_app_name(app, "app")
    body = json_codec.decode(await read_body(request))
    registry, now_ms = request.app[REGISTRY], request.app[CLOCK].wall_ms()
    # Later than any decision this node holds on it: the call is the latest, whatever the
    # clock did (core/app_checks.py).
    at_ms = registry.app_checks.next_ms(app, now_ms)
    check = app_check_from(app, body, now_ms=at_ms, by=auth.principal(request))
    if not settings.checks.enabled:
        raise BadInput(
            "check",
            "checks.enabled is false on this node: it would run no check; ask a node with "
            "checks on",
        )
    registry.set_app_check(check, now_ms=now_ms)
    await committed(request, "check")
    return _json(_answer(request, registry, registry.app_checks.get(app) or check))


async def remove_app_check(request: web.Request) -> web.Response:
    registry, app = request.app[REGISTRY], params.app_name(request)
    if app not in registry.app_checks:
        raise UnknownApplication(f"no check is set on {app}")
    now_ms = request.app[CLOCK].wall_ms()
    registry.remove_app_check(app, at_ms=registry.app_checks.next_ms(app, now_ms), now_ms=now_ms)
    await committed(request, "check's removal")
    return web.Response()


def _answer(request: web.Request, registry: Registry, check: AppCheck) -> dict[str, Any]:
    """The check, and how it meets the application's instances now."""
    checker, settings = request.app[CHECKER], request.app[SETTINGS]
    destinations = Destinations(settings) if checker is None else checker.destinations
    instances, refused = 0, {}
    for lease in registry.application(check.app):
        instances += 1
        try:
            check_spec(lease.instance, destinations, settings, check)
        except BadInput as exc:
            refused[lease.instance.instance_id] = str(exc)
    return {
        "check": app_check_fields(check),
        "instances": instances,
        "checked": instances - len(refused),
        "notCheckable": [
            {"instanceId": iid, "reason": why} for iid, why in sorted(refused.items())[:MAX_LISTED]
        ],
        "checksRunHere": checker is not None,
    }


def _by_app(fields: dict[str, Any]) -> str:
    return str(fields["app"])


def _json(body: object) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")
