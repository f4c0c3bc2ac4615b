"""GET status: the server's general and replica statistics, for dashboards (contract 3.14)."""

from __future__ import annotations

import asyncio
import os
from typing import Any
from xml.sax.saxutils import escape as xml_escape

import orjson
from aiohttp import web

from registry.appkeys import (
    CLOCK,
    CLUSTER,
    LIFECYCLE,
    PRESERVATION,
    REGISTRY,
    STARTED_AT,
    WRITER,
)
from registry.codec import Format
from registry.codec.xml_codec import escape_name
from registry.http.negotiation import payload, response_format
from registry.lifecycle import Phase

_MB = 1024 * 1024


async def status(request: web.Request) -> web.Response:
    total, used = await asyncio.to_thread(_memory)
    registry = request.app[REGISTRY]
    uptime = request.app[CLOCK].monotonic() - request.app[STARTED_AT]
    health = node_health(request.app)
    peers = health["peers"]
    reachable = [p["url"] for p in peers if p["reachable"]]
    lifecycle = request.app[LIFECYCLE]
    info: dict[str, Any] = {
        "generalStats": {
            "environment": "default",
            "num-of-cpus": str(os.cpu_count() or 1),
            "total-avail-memory": f"{total // _MB}mb",
            "current-memory-usage": f"{used // _MB}mb ({100 * used // max(total, 1)}%)",
            "server-uptime": _uptime(uptime),
            "registry-size": str(len(registry)),
            "registry-index": str(registry.index),
            "phase": lifecycle.phase.value,
            "serving-reads": "true" if lifecycle.serves_reads else "false",
            "reads-reason": lifecycle.reason,
            "shutting-down": lifecycle.leaving,
        },
        # Eureka's replica lists (contract 11.6); "available" means answering replication.
        "applicationStats": {
            "registered-replicas": ", ".join(p["url"] for p in peers),
            "available-replicas": "".join(f"{url}," for url in reachable),
            "unavailable-replicas": "".join(
                f"{p['url']}," for p in peers if p["url"] not in reachable
            ),
        },
        **health,
    }
    fmt = response_format(request)
    body = orjson.dumps(info) if fmt is Format.JSON else _xml(info)
    return payload(request, fmt, body)


def node_health(app: web.Application) -> dict[str, Any]:
    """Each peer's health, where the peers come from, self-preservation's verdict and the
    store's state: the part of `GET status` the status page shows too."""
    registry = app[REGISTRY]
    return {
        "peers": app[CLUSTER].status(),
        "membership": app[CLUSTER].membership_status(),
        # Why eviction runs or is held, with every input of the decision (contract 8).
        "selfPreservation": app[PRESERVATION].status(len(registry), app[CLOCK].monotonic()),
        "store": _store_status(app),
    }


async def healthz(request: web.Request) -> web.Response:
    """GET /healthz: the process is alive and its event loop answers."""
    return web.Response(body=orjson.dumps({"alive": True}), content_type="application/json")


async def readyz(request: web.Request) -> web.Response:
    """GET /readyz: 200 when this node is SERVING, not leaving, and its store writes, else
    503, for load balancers and orchestrators to route by.

    Open to anyone (probes carry no credentials), so it says ready or not and why in a few
    fixed words, never peer URLs or error texts: a node syncing from 300 unreachable peers
    answered 26 KB of them here. The detail is `GET status`'s, on the client plane."""
    app = request.app
    lifecycle = app[LIFECYCLE]
    writer = app[WRITER]
    reasons = []
    if lifecycle.phase in (Phase.STARTING, Phase.RESTORING):
        reasons.append("starting")
    elif lifecycle.phase is Phase.SYNCING:
        cluster = app[CLUSTER]
        peers = cluster.dispatchers or cluster.membership.dns is not None
        reasons.append("syncing with peers" if peers else "store lost: clients register again")
    elif lifecycle.phase is not Phase.SERVING or lifecycle.leaving:
        reasons.append("shutting down")
    if writer is not None and writer.degraded:
        reasons.append("store failing")
    warnings = []  # ready, but an operator should know
    if writer is not None and writer.moved_aside is not None:
        warnings.append("store was corrupt: started without what it held")
    body = orjson.dumps(
        {
            "ready": not reasons,
            "phase": lifecycle.phase.value,
            "reasons": reasons,
            "warnings": warnings,
        }
    )
    return web.Response(body=body, status=503 if reasons else 200, content_type="application/json")


def _store_status(app: web.Application) -> dict[str, object]:
    writer = app[WRITER]
    if writer is not None:
        return writer.status()
    return {"enabled": False}


def _uptime(seconds: float) -> str:
    minutes = int(seconds // 60)
    days, minutes = divmod(minutes, 24 * 60)
    clock = f"{minutes // 60:02d}:{minutes % 60:02d}"
    return f"{days} days {clock}" if days else clock


def _memory() -> tuple[int, int]:
    """Physical memory of the machine and resident memory of this process, in bytes."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = os.sysconf("SC_PHYS_PAGES") * page
    try:
        with open("/proc/self/statm", "rb") as f:
            used = int(f.read().split()[1]) * page
    except OSError:
        used = 0
    return total, used


def _xml(info: dict[str, Any]) -> bytes:
    return ("<status>" + _xml_fields(info) + "</status>").encode()


def _xml_fields(values: dict[str, Any]) -> str:
    parts = []
    for key, value in values.items():
        if isinstance(value, list):  # a list of peers (or URLs): one <peer> element each
            inner = "".join(
                f"<peer>{_xml_fields(v) if isinstance(v, dict) else xml_escape(str(v))}</peer>"
                for v in value
            )
        elif isinstance(value, dict):
            inner = _xml_fields(value)
        elif isinstance(value, bool):
            inner = "true" if value else "false"
        else:
            inner = xml_escape("" if value is None else str(value))
        parts.append(f"<{escape_name(key)}>{inner}</{escape_name(key)}>")
    return "".join(parts)
