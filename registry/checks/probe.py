"""One check, bounded in time: an HTTP GET (healthy on 2xx, redirects not followed) or a TCP
connect, to the address and port `spec` names (registry/checks/spec.py) and nowhere else.

An https check does not verify the certificate: it is made to an address (the instance's
name in the Host header), and asks whether the service answers, not who it is.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp

from registry.checks.spec import CheckSpec
from registry.common.clock import Clock

USER_AGENT = "service-registry-health-check"


@dataclass(frozen=True, slots=True)
class Outcome:
    healthy: bool
    detail: str  # "HTTP 200", "HTTP 503", "connection refused", "timed out after 2 s"
    seconds: float


async def probe(spec: CheckSpec, session: aiohttp.ClientSession, clock: Clock) -> Outcome:
    started = clock.monotonic()
    try:
        async with asyncio.timeout(spec.timeout):
            healthy, detail = await (_http(spec, session) if spec.kind == "http" else _tcp(spec))
    except TimeoutError:
        healthy, detail = False, f"timed out after {spec.timeout:g} s"
    except (OSError, aiohttp.ClientError) as exc:
        healthy, detail = False, _reason(exc)
    return Outcome(healthy, detail, clock.monotonic() - started)


async def _http(spec: CheckSpec, session: aiohttp.ClientSession) -> tuple[bool, str]:
    host = f"[{spec.address}]" if ":" in spec.address else spec.address
    url = f"{spec.scheme}://{host}:{spec.port}{spec.target}"
    headers = {"Host": spec.host, "User-Agent": USER_AGENT}
    async with session.get(url, headers=headers, allow_redirects=False, ssl=False) as response:
        return 200 <= response.status < 300, f"HTTP {response.status}"


async def _tcp(spec: CheckSpec) -> tuple[bool, str]:
    _, writer = await asyncio.open_connection(spec.address, spec.port)
    writer.close()
    await writer.wait_closed()
    return True, "connected"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError) or "refused" in str(exc).lower():
        return "connection refused"
    return str(exc) or type(exc).__name__
