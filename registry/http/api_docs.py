"""What each operation of the HTTP API does, answers and takes, in OpenAPI 3.1 terms.

The route table (routes.py) names one of these for every route it has, beside its handler
and plane; openapi.py puts them together into `/openapi.json`. Instance documents follow
Eureka's wire format (JSON wrapped as {"instance": ...}, or XML); they are described by
reference to it rather than field by field.
"""

from __future__ import annotations

from typing import Any

Operation = dict[str, Any]

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {
        "error": {"type": "string", "examples": ["bad_input"]},
        "detail": {"type": "string"},
        "field": {"type": "string", "description": "the input at fault, for validation errors"},
    },
}
_EUREKA_DOC = {
    "description": "A document in Eureka's wire format: JSON when Accept mentions json, XML "
    "otherwise; gzip when Accept-Encoding asks for it.",
    "content": {"application/json": {}, "application/xml": {}},
}
_JSON_DOC = {"description": "A JSON document.", "content": {"application/json": {}}}
_NO_BODY = {"description": "Done; no body."}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _param(where: str, name: str, description: str, *, required: bool) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required,
        "schema": {"type": "string"},
        "description": description,
    }


def _path(name: str, description: str) -> dict[str, Any]:
    return _param("path", name, description, required=True)


def _query(name: str, description: str, *, required: bool = False) -> dict[str, Any]:
    return _param("query", name, description, required=required)


APP = _path("app", "application name (case-insensitive)")
ID = _path("id", "instance id")
VIP = _path("vip", "VIP address (one name of a comma-separated list)")
LAST_DIRTY = _query("lastDirtyTimestamp", "the client's lastDirtyTimestamp (epoch ms)")
REPLICATION = _param(
    "header",
    "x-netflix-discovery-replication",
    "the call comes from a peer node (true)",
    required=False,
)
NOT_FOUND = _error("No such instance or application.")
BAD = _error("Bad input; nothing changed.")
NOT_SYNCED = _error("Reads are not served yet (copying the registry from peers).")
STORE_503 = _error("In force in memory, but not yet written to disk.")
EXPIRED = _error("The index is not one this node can go on from: fetch apps in full.")
INSTANCE_BODY = {
    "required": True,
    "description": 'An instance in Eureka\'s wire format: {"instance": {...}} or <instance>.',
    "content": {"application/json": {}, "application/xml": {}},
}


def _op(summary: str, responses: dict[str, Any], **extra: Any) -> Operation:
    return {"summary": summary, "responses": responses, **extra}


NAME = _path("name", "status.js or status.css")
# What a guard around an operation may answer instead of it.
REFUSED = {
    "401": _error("No credential, or one this node does not know."),
    "403": _error("A credential of another plane."),
}
THROTTLED = {"429": _error("Fetching faster than this client's bucket allows; see Retry-After.")}
# The parameters a path's {placeholders} take, by name.
PATH_PARAMETERS = {"app": APP, "id": ID, "vip": VIP, "name": NAME}

HEARTBEAT = _op(
    "Heartbeat: renew the lease",
    {
        "200": _NO_BODY,
        "404": NOT_FOUND,
        "409": _EUREKA_DOC
        | {"description": "A peer holds older data: here is ours (replication only)."},
    },
    parameters=[
        LAST_DIRTY,
        _query("overriddenstatus", "the caller's override"),
        _query("status", "ignored, as in Eureka"),
        REPLICATION,
    ],
)
CANCEL = _op("Cancel: deregister", {"200": _NO_BODY, "404": NOT_FOUND}, parameters=[REPLICATION])
INSTANCE = _op("One instance", {"200": _EUREKA_DOC, "404": NOT_FOUND})
ZONE = _query(
    "zone",
    "only the instances in this zone (metadata zone, else Amazon's availability-zone), hashed "
    "over what is shown",
)
FULL = _op(
    "The full registry", {"200": _EUREKA_DOC, "400": BAD, "403": NOT_SYNCED}, parameters=[ZONE]
)
REGISTER_DELTA = _op(
    "Register an instance of an application named DELTA",
    {"204": _NO_BODY, "400": BAD},
    requestBody=INSTANCE_BODY,
    parameters=[REPLICATION],
)
DELTA = _op(
    "Recent changes; with index, the changes after it, held with wait (long-poll)",
    {"200": _EUREKA_DOC, "400": BAD, "403": NOT_SYNCED, "410": EXPIRED},
    parameters=[
        _query(
            "index",
            "give the changes after this registry index (the answer says it in "
            "X-Registry-Since; ignored, with wait, when the server's long_poll is off)",
        ),
        _query("epoch", "the epoch the index belongs to (X-Registry-Epoch)"),
        _query("wait", "hold until a change, at most this long: 500ms, 30s, 2m"),
    ],
)
REGISTER = _op(
    "Register (or re-register) an instance",
    {"204": _NO_BODY, "400": BAD, "415": _error("A body format that is not read.")},
    requestBody=INSTANCE_BODY,
    parameters=[REPLICATION],
)
APPLICATION = _op(
    "One application",
    {"200": _EUREKA_DOC, "400": BAD, "403": NOT_SYNCED, "404": NOT_FOUND},
    parameters=[ZONE],
)
SET_OVERRIDE = _op(
    "Set an admin status override; on disk before the answer",
    {"200": _NO_BODY, "400": BAD, "404": NOT_FOUND, "503": STORE_503},
    parameters=[
        _query("value", "the status to force", required=True),
        _query("reason", "why, in the admin's words"),
        _query("expires", "until when: 30m, 8h, 7d or an ISO 8601 time"),
        LAST_DIRTY,
        REPLICATION,
    ],
)
DELETE_OVERRIDE = _op(
    "Remove the override, leaving status value (default UNKNOWN)",
    {"200": _NO_BODY, "400": BAD, "404": NOT_FOUND, "503": STORE_503},
    parameters=[_query("value", "the status to leave"), LAST_DIRTY, REPLICATION],
)
EXPLAIN = _op(
    "Which rule of the chain (or admin action) decided the status, and its inputs",
    {"200": _JSON_DOC, "404": NOT_FOUND},
)
METADATA = _op(
    "Merge metadata (every query parameter is an entry)",
    {"200": _NO_BODY, "400": BAD, "404": NOT_FOUND},
)
INSTANCE_BY_ID = _op(
    "One instance, in whichever application holds its id",
    {
        "200": _EUREKA_DOC,
        "404": NOT_FOUND,
        "409": _error("More than one application holds the id: ask apps/{app}/{id}."),
    },
)
VIPS = _op(
    "Instances by VIP address",
    {"200": _EUREKA_DOC, "400": BAD, "403": NOT_SYNCED},
    parameters=[ZONE],
)
SECURE_VIPS = _op(
    "Instances by secure VIP address",
    {"200": _EUREKA_DOC, "400": BAD, "403": NOT_SYNCED},
    parameters=[ZONE],
)
STATUS = _op("Server statistics, peers, self-preservation, store", {"200": _EUREKA_DOC})
OVERRIDES = _op("Overrides in force, with reason, time set and expiry", {"200": _JSON_DOC})
OVERRIDE_HISTORY = _op(
    "Overrides set, deleted, cancelled and expired, oldest first",
    {
        "200": _JSON_DOC,
        "400": BAD,
        "403": _error("The store is off."),
        "503": _error("The store cannot be read now."),
    },
    parameters=[
        _query("since", "from this time (epoch ms)"),
        _query("after", "after this change: the `next` of the page before"),
        _query("limit", "changes in this page, 1 to 10 000 (1 000 by default)"),
    ],
)
NO_CHECK = _error("No check is set on this application.")
APP_CHECKS = _op("Admins' checks on applications", {"200": _JSON_DOC})
APP_CHECK = _op(
    "The admin's check on an application, and the instances it checks and cannot",
    {"200": _JSON_DOC, "404": NO_CHECK},
)
SET_APP_CHECK = _op(
    "Check every instance of an application (over what its metadata asks); on disk before the "
    "answer",
    {"200": _JSON_DOC, "400": BAD, "503": STORE_503},
    requestBody={
        "required": True,
        "description": '{"check": "http" or "tcp", "interval": seconds (10), "timeout": '
        'seconds (2), "path": "/health" (http: instead of each healthCheckUrl)}',
        "content": {"application/json": {}},
    },
)
REMOVE_APP_CHECK = _op(
    "Remove the application's check: its instances go back to their own metadata's",
    {"200": _NO_BODY, "404": NO_CHECK, "503": STORE_503},
)
WATCH = _op(
    "Changes as Server-Sent Events (ADDED, MODIFIED, DELETED, reset)",
    {
        "200": {
            "description": "An event stream; each change's data carries the instance and the "
            "registry's apps__hashcode after it (hashcode).",
            "content": {"text/event-stream": {}},
        },
        "400": BAD,
        "403": _error("Reads are not served yet, or the stream is turned off (watch = false)."),
    },
    parameters=[
        _param("header", "Last-Event-ID", "resume after index@epoch", required=False),
        _query("index", "resume after this registry index"),
        _query("epoch", "the epoch of that index"),
        _query("apps", "only these applications' changes (comma-separated), with their hashcode"),
        _query("vips", "only the changes of instances with these VIP addresses (comma-separated)"),
    ],
)
PEER_BATCH = _op(
    "A peer's changes, answered item by item (Eureka's batch format)",
    {"200": _JSON_DOC, "400": BAD},
    requestBody={"required": True, "content": {"application/json": {}}},
)
PEER_DIGEST = _op(
    "Per-application digests, for anti-entropy, the notes of the overrides in force and the "
    "override removals remembered",
    {"200": _JSON_DOC},
)
PEER_REMOVED = _op(
    "The removals (cancels, evictions) this node remembers, of one application or all",
    {"200": _JSON_DOC},
    parameters=[_query("app", "only this application's")],
)
STATUS_OVERRIDES = _op("Overrides in force, id -> status (as Netflix's server)", {"200": _JSON_DOC})
HEALTHZ = _op("The process is alive", {"200": _JSON_DOC})
READYZ = _op(
    "Ready: the node is SERVING (its phase is in the answer) and its store writes; the reasons "
    "it is not, and warnings an operator should know even so (a corrupt store moved aside), "
    "in a few fixed words; the detail is in GET status",
    {"200": _JSON_DOC, "503": _JSON_DOC | {"description": "Not ready, with the reasons."}},
)
OPENAPI = _op("This document", {"200": _JSON_DOC})
METRICS = _op(
    "Metrics in Prometheus' text format",
    {"200": {"description": "Prometheus text.", "content": {"text/plain": {}}}},
)
PAGE = _op(
    "The status page, for people",
    {"200": {"description": "An HTML page.", "content": {"text/html": {}}}},
)
PAGE_ASSET = _op(
    "The status page's script and style sheet",
    {
        "200": {"description": "The file.", "content": {"text/javascript": {}, "text/css": {}}},
        "404": _error("No such file."),
    },
)
