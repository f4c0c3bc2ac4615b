"""One check, bounded in time: an HTTP GET (healthy on 2xx, redirects not followed) or a TCP
connect, to the address and port `spec` names (registry/checks/spec.py) and nowhere else.

An https check does not verify the certificate: it is made to an address (the instance's
public name, or the address, in the Host header: spec.py), and asks whether the service
answers, not who it is. An outcome's detail is a few words ("HTTP 503", "connection
refused", an error's type and text cut short): admins read it, clients never do.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from dataclasses import dataclass

from registry.checks.spec import CheckSpec
from registry.common.clock import Clock

USER_AGENT = "service-registry-health-check"


@dataclass(frozen=True, slots=True)
class Outcome:
    healthy: bool
    detail: str  # "HTTP 200", "HTTP 503", "connection refused", "timed out after 2 s"
    seconds: float


async def probe(spec: CheckSpec, clock: Clock) -> Outcome:
    started = clock.monotonic()
    try:
        async with asyncio.timeout(spec.timeout):
            healthy, detail = await (_http(spec) if spec.kind == "http" else _tcp(spec))
    except TimeoutError:
        healthy, detail = False, f"timed out after {spec.timeout:g} s"
    except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
        healthy, detail = False, _reason(exc)
    return Outcome(healthy, detail, clock.monotonic() - started)


async def _http(spec: CheckSpec) -> tuple[bool, str]:
    """One request on a connection of its own, its status line read and nothing more: plain
    asyncio streams, which cost a fraction of an HTTP client's machinery per check (profiled
    at 1 000 checks a second: connection set-up and response objects were most of it)."""
    secure = spec.scheme == "https"
    reader, writer = await asyncio.open_connection(
        spec.address,
        spec.port,
        ssl=_unverified() if secure else None,
        server_hostname=spec.host if secure else None,
    )
    try:
        writer.write(
            f"GET {spec.target} HTTP/1.1\r\nHost: {_host_header(spec)}\r\n"
            f"User-Agent: {USER_AGENT}\r\nAccept: */*\r\nConnection: close\r\n\r\n".encode()
        )
        line = await reader.readline()
    finally:
        writer.transport.abort()  # at once: a TLS close would wait for the peer's goodbye
    version, _, rest = line.decode("latin-1").partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/") or not code.isdigit():
        return False, "not an HTTP answer"
    return 200 <= int(code) < 300, f"HTTP {code}"


async def _tcp(spec: CheckSpec) -> tuple[bool, str]:
    _, writer = await asyncio.open_connection(spec.address, spec.port)
    writer.close()
    return True, "connected"


def _host_header(spec: CheckSpec) -> str:
    default = 443 if spec.scheme == "https" else 80
    host = f"[{spec.host}]" if ":" in spec.host else spec.host
    return host if spec.port == default else f"{host}:{spec.port}"


MAX_DETAIL = 200  # characters of an outcome's detail (what peers take of a hold's: codec/checks)


def _reason(exc: BaseException) -> str:
    """What went wrong, in a few words: the exception's own text is for admins only (the
    status page and status/explain show outcomes to them alone), and cut short."""
    text = str(exc)
    if isinstance(exc, ConnectionRefusedError) or "refused" in text.lower():
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {exc.reason or type(exc).__name__}"[:MAX_DETAIL]
    if isinstance(exc, asyncio.IncompleteReadError):
        return "connection closed before an answer"
    return f"{type(exc).__name__}: {text}"[:MAX_DETAIL] if text else type(exc).__name__


@functools.cache
def _unverified() -> ssl.SSLContext:
    """Made at the first https check: making it reads the system's certificates (15 ms)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
