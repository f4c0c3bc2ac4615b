"""GET status: the server's general and replica statistics, for dashboards (contract 3.14)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import orjson
from aiohttp import web

from registry.appkeys import CLOCK, REGISTRY, STARTED_AT
from registry.codec import Format
from registry.codec.xml_codec import escape_name
from registry.http.negotiation import payload, response_format

_MB = 1024 * 1024


async def status(request: web.Request) -> web.Response:
    total, used = await asyncio.to_thread(_memory)
    registry = request.app[REGISTRY]
    uptime = request.app[CLOCK].monotonic() - request.app[STARTED_AT]
    info: dict[str, dict[str, str]] = {
        "generalStats": {
            "environment": "default",
            "num-of-cpus": str(os.cpu_count() or 1),
            "total-avail-memory": f"{total // _MB}mb",
            "current-memory-usage": f"{used // _MB}mb ({100 * used // max(total, 1)}%)",
            "server-uptime": _uptime(uptime),
            "registry-size": str(len(registry)),
            "registry-index": str(registry.index),
        },
        # Replication is not configured on this node: no replicas to report.
        "applicationStats": {
            "registered-replicas": "",
            "available-replicas": "",
            "unavailable-replicas": "",
        },
    }
    fmt = response_format(request)
    body = orjson.dumps(info) if fmt is Format.JSON else _xml(info)
    return payload(request, fmt, body)


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


def _xml(info: dict[str, dict[str, str]]) -> bytes:
    parts: list[Any] = ["<status>"]
    for section, values in info.items():
        parts.append(f"<{section}>")
        parts.extend(f"<{escape_name(k)}>{v}</{escape_name(k)}>" for k, v in values.items())
        parts.append(f"</{section}>")
    parts.append("</status>")
    return "".join(parts).encode()
