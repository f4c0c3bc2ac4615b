"""The admin CLI: `python -m registry apps|instances|out-of-service|in-service|explain|status|
checks|check|uncheck`.

It talks to a running server over HTTP (standard library only: a command is one request or
two), prints readable tables, or the server's JSON with `--json`. The server's URL comes from
`--server` or `REGISTRY_SERVER` (default http://127.0.0.1:8761/eureka/); credentials from
`--user`/`--password` or `REGISTRY_USER`/`REGISTRY_PASSWORD`, sent as HTTP Basic, or an admin
bearer token from `--token` or `REGISTRY_TOKEN`; never printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from registry.codec.wire import basic_authorization

DEFAULT_SERVER = "http://127.0.0.1:8761/eureka/"
TIMEOUT = 10.0


class CliError(Exception):
    """What to tell the user before exiting 1."""


def add_commands(commands: Any) -> None:
    """The admin subcommands, on the `python -m registry` parser's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", help=f"the server's base URL (default {DEFAULT_SERVER})")
    common.add_argument("--user", help="user name (or REGISTRY_USER)")
    common.add_argument("--password", help="password (or REGISTRY_PASSWORD)")
    common.add_argument("--token", help="an admin bearer token instead (or REGISTRY_TOKEN)")
    common.add_argument("--json", action="store_true", help="print the server's JSON")

    def command(name: str, run: Callable[[argparse.Namespace], int], help: str) -> Any:
        parser = commands.add_parser(name, parents=[common], help=help)
        parser.set_defaults(run=run)
        return parser

    command("apps", _apps, "applications and their instance counts by status")
    command("instances", _instances, "one application's instances").add_argument("app")
    out = command("out-of-service", _out_of_service, "take an instance out of traffic")
    out.add_argument("app")
    out.add_argument("id")
    out.add_argument("--reason", help="why, recorded with the override")
    out.add_argument("--expires", help="until when: 30m, 8h, 7d or an ISO 8601 time")
    back = command("in-service", _in_service, "remove the override: back into traffic")
    back.add_argument("app")
    back.add_argument("id")
    explain = command("explain", _explain, "which rule decided an instance's status")
    explain.add_argument("app")
    explain.add_argument("id")
    command("status", _status, "the server's status: self-preservation, store, peers")
    command("checks", _checks, "the checks admins set on applications")
    check = command("check", _check, "check every instance of an application")
    check.add_argument("app")
    check.add_argument("kind", choices=("http", "tcp"))
    check.add_argument("--path", help="http: GET this at each instance (default: healthCheckUrl)")
    check.add_argument("--interval", type=float, help="seconds between checks (default 10)")
    check.add_argument("--timeout", type=float, help="seconds a check may take (default 2)")
    command("uncheck", _uncheck, "remove an application's check").add_argument("app")


def run(args: argparse.Namespace) -> int:
    try:
        return int(args.run(args))
    except CliError as exc:
        print(f"service-registry: {exc}", file=sys.stderr)
        return 1


# Commands -----------------------------------------------------------------------------------


def _apps(args: argparse.Namespace) -> int:
    doc = _request(args, "GET", "apps")
    if args.json:
        return _print_json(doc)
    rows = []
    for app in doc["applications"]["application"]:
        statuses: dict[str, int] = {}
        for instance in app["instance"]:
            statuses[instance["status"]] = statuses.get(instance["status"], 0) + 1
        counts = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
        rows.append((app["name"], str(len(app["instance"])), counts))
    _table(("APPLICATION", "INSTANCES", "BY STATUS"), rows)
    return 0


def _instances(args: argparse.Namespace) -> int:
    doc = _request(args, "GET", f"apps/{_segment(args.app)}")
    if args.json:
        return _print_json(doc)
    rows = [
        (
            i["instanceId"],
            i["status"],
            "" if i["overriddenStatus"] == "UNKNOWN" else i["overriddenStatus"],
            f"{i['hostName']}:{i['port']['$']}",
        )
        for i in doc["application"]["instance"]
    ]
    _table(("INSTANCE", "STATUS", "OVERRIDE", "ADDRESS"), rows)
    return 0


def _out_of_service(args: argparse.Namespace) -> int:
    query = {"value": "OUT_OF_SERVICE"}
    if args.reason:
        query["reason"] = args.reason
    if args.expires:
        query["expires"] = args.expires
    _request(args, "PUT", f"{_instance_path(args)}/status", query)
    print(f"{args.app}/{args.id} is OUT_OF_SERVICE")
    return 0


def _in_service(args: argparse.Namespace) -> int:
    _request(args, "DELETE", f"{_instance_path(args)}/status", {"value": "UP"})
    print(f"{args.app}/{args.id}: override removed, UP")
    return 0


def _explain(args: argparse.Namespace) -> int:
    doc = _request(args, "GET", f"{_instance_path(args)}/status/explain")
    if args.json:
        return _print_json(doc)
    print(f"{doc['app']}/{doc['instanceId']} is {doc['status']}, decided by {doc['decidedBy']}")
    if doc["inputs"]:
        inputs = ", ".join(f"{key} {value}" for key, value in doc["inputs"].items())
        print(f"  inputs: {inputs}")
    for step in doc["chain"]:
        print(f"  {step['rule']}: {step['answer'] or 'passes'}")
    if doc["override"]:
        o = doc["override"]
        print(f"  override reason: {o['reason'] or '-'}; expires: {o['expiresAt'] or 'never'}")
    return 0


def _status(args: argparse.Namespace) -> int:
    doc = _request(args, "GET", "status")
    if args.json:
        return _print_json(doc)
    general, sp, store = doc["generalStats"], doc["selfPreservation"], doc["store"]
    print(f"instances: {general['registry-size']}; index {general['registry-index']}")
    print(f"uptime: {general['server-uptime']}; reads: {general['reads-reason']}")
    print(f"eviction: {'runs' if sp['evicting'] else 'HELD'}: {sp['reason']}")
    if sp.get("expired-held"):  # a server of an older release does not say
        print(f"expired leases kept: {sp['expired-held']} ({sp['expired-on-peers']} by peers)")
    if store.get("enabled"):
        state = "DEGRADED: " + str(store["last-error"]) if store["degraded"] else "writing"
        print(f"store: {state} ({store['pending']} pending)")
    for peer in doc["peers"]:
        print(f"peer {peer['url']}: {'reachable' if peer['reachable'] else 'UNREACHABLE'}")
    return 0


def _checks(args: argparse.Namespace) -> int:
    doc = _request(args, "GET", "checks")
    if args.json:
        return _print_json(doc)
    rows = [
        (
            c["app"],
            c["check"],
            c["path"] or "",
            f"{c['interval']:g}",
            f"{c['timeout']:g}",
            c["setBy"] or "",
        )
        for c in doc["checks"]
    ]
    _table(("APPLICATION", "CHECK", "PATH", "INTERVAL", "TIMEOUT", "SET BY"), rows)
    return 0


def _check(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"check": args.kind}
    for field in ("path", "interval", "timeout"):
        if getattr(args, field) is not None:
            body[field] = getattr(args, field)
    doc = _request(args, "PUT", f"checks/{_segment(args.app)}", body=body)
    if args.json:
        return _print_json(doc)
    print(f"{args.app.upper()}: {doc['checked']} of {doc['instances']} instances checked")
    for refused in doc["notCheckable"]:
        print(f"  not checkable: {refused['instanceId']}: {refused['reason']}")
    return 0


def _uncheck(args: argparse.Namespace) -> int:
    _request(args, "DELETE", f"checks/{_segment(args.app)}")
    print(f"{args.app.upper()}: check removed")
    return 0


# HTTP ---------------------------------------------------------------------------------------


def _authorization(args: argparse.Namespace) -> str | None:
    """Flags before the environment; a user (HTTP Basic) before a token (bearer)."""
    env = os.environ.get
    for user, password, token in (
        (args.user, args.password, args.token),
        (env("REGISTRY_USER"), env("REGISTRY_PASSWORD"), env("REGISTRY_TOKEN")),
    ):
        if user:
            return basic_authorization(f"{user}:{password or env('REGISTRY_PASSWORD', '')}")
        if token:
            return f"Bearer {token}"
    return None


def _request(
    args: argparse.Namespace,
    method: str,
    path: str,
    query: dict[str, str] | None = None,
    *,
    body: Any = None,
) -> Any:
    """One call to the server (`body` sent as JSON); its JSON answer (None when empty), or
    CliError saying why."""
    base = args.server or os.environ.get("REGISTRY_SERVER") or DEFAULT_SERVER
    url = base.rstrip("/") + "/" + path + ("?" + urllib.parse.urlencode(query) if query else "")
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data, headers["Content-Type"] = orjson.dumps(body), "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    authorization = _authorization(args)
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise CliError(f"{method} {path}: {exc.code} {_detail(exc.read())}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise CliError(f"cannot reach {base}: {getattr(exc, 'reason', exc)}") from None
    return orjson.loads(body) if body else None


def _detail(body: bytes) -> str:
    try:
        return str(orjson.loads(body).get("detail", ""))
    except (orjson.JSONDecodeError, AttributeError):
        return body.decode(errors="replace")[:200]


def _instance_path(args: argparse.Namespace) -> str:
    return f"apps/{_segment(args.app)}/{_segment(args.id)}"


def _segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


# Output -------------------------------------------------------------------------------------


def _print_json(doc: Any) -> int:
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
