"""The checks scenario: server-side health checks at scale, beside the heartbeat probe.

Two servers in turn, each holding INSTANCES instances in APPS applications: the first without
checks, the second with every instance asking for an http check every CHECK_INTERVAL (10 000
every 10 s: 1 000 checks a second) against a local target, a process of its own answering 200
on loopback (`python -m tests.bench.checks target PORT`). On each, for `seconds`, the scale
scenario's heartbeat probe runs (a heartbeat every 10 ms, each on a connection of its own, timed
from when it fell due: tests/bench/scale_clients.py), over the same instances. Reported: the
probe's p50, p99 and max with and without the checks, the server's CPU a second, the checks run
meanwhile (from /metrics) and the CPU each cost (the CPU a second more, over the checks a
second).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import aiohttp

from tests.bench import processes
from tests.bench.scale_clients import run_helper
from tests.bench.scale_requests import register_scale
from tests.bench.scenarios import Plan
from tests.helpers import free_port

INSTANCES = 10_000
APPS = 100
CHECK_INTERVAL = 10
SECONDS = 30.0
SMOKE = {"instances": 500, "seconds": 3.0}
LEAD = 2.0  # seconds between the probe's start and its first heartbeat

Row = tuple[str, str, str, str, str, str, str]


async def checks(plan: Plan) -> dict[str, Any]:
    instances = SMOKE["instances"] if plan.smoke else INSTANCES
    seconds = SMOKE["seconds"] if plan.smoke else SECONDS
    port = free_port()
    target = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.bench.checks", "target", str(port)
    )
    try:
        without = await _run(instances, seconds, None)
        checked = await _run(instances, seconds, port)
    finally:
        target.kill()
        await target.wait()
    extra_cpu = checked["server_cpu_share"] - without["server_cpu_share"]
    rate = checked["checks_per_second"]
    return {
        "instances": instances,
        "check_interval_s": CHECK_INTERVAL,
        "without_checks": without,
        "with_checks": checked,
        "cpu_us_per_check": round(1e6 * extra_cpu / rate, 1) if rate else None,
    }


async def _run(instances: int, seconds: float, target_port: int | None) -> dict[str, Any]:
    settings: dict[str, object] = {
        "leases__eviction_interval": 3600,
        "checks__loopback": "true",
        "checks__min_interval": "1",
    }
    async with processes.registry(**settings) as server:
        await _register(server, instances, target_port)
        async with aiohttp.ClientSession() as session:
            checks_before = await _checks_run(session, server)
            cpu_before = server.cpu_seconds()
            start = time.monotonic() + LEAD
            probed = await run_helper(
                "probe",
                {
                    "url": server.url,
                    "instances": instances,
                    "apps": APPS,
                    "start": start,
                    "end": start + seconds,
                },
                LEAD + seconds + 30,
            )
            elapsed = time.monotonic() - start + LEAD
            cpu = server.cpu_seconds() - cpu_before
            ran = await _checks_run(session, server) - checks_before
    return {
        "probe": {key: probed[key] for key in ("answered", "p50_ms", "p99_ms", "max_ms", "errors")},
        "server_cpu_share": round(cpu / elapsed, 3),
        "checks_per_second": round(ran / elapsed, 1),
    }


async def _register(server: processes.Server, instances: int, target_port: int | None) -> None:
    """The probe's instances (tests/bench/scale_requests.py names them), each with a check on
    the target when there is one."""

    def checked(instance: dict[str, Any]) -> None:
        instance |= {
            "ipAddr": "127.0.0.1",
            "port": {"$": target_port, "@enabled": "true"},
            "healthCheckUrl": f"http://127.0.0.1:{target_port}/health",
            "metadata": {
                "registry.check": "http",
                "registry.check.interval": str(CHECK_INTERVAL),
            },
        }

    await register_scale(server.url, instances, APPS, checked if target_port else None)


async def _checks_run(session: aiohttp.ClientSession, server: processes.Server) -> float:
    async with session.get(f"{server.url}/metrics") as response:
        for line in (await response.text()).splitlines():
            if line.startswith("registry_health_checks_total "):
                return float(line.split()[1])
    return 0.0


def checks_rows(figure: dict[str, Any]) -> list[Row]:
    def probe(side: dict[str, Any]) -> str:
        p = side["probe"]
        return f"{p['p50_ms']} / {p['p99_ms']} / max {p['max_ms']} ms"

    without, checked = figure["without_checks"], figure["with_checks"]
    return [
        (
            f"checks ({figure['instances']} instances, every {figure['check_interval_s']} s)",
            f"{checked['checks_per_second']} checks/s",
            "",
            "",
            "",
            "",
            "",
        ),
        ("  heartbeat probe without checks", probe(without), "", "", "", "", ""),
        ("  heartbeat probe with checks", probe(checked), "", "", "", "", ""),
        (
            "  server CPU a second",
            f"{without['server_cpu_share']} -> {checked['server_cpu_share']}",
            "",
            "",
            "",
            "",
            f"{figure['cpu_us_per_check']} us per check",
        ),
    ]


async def _target(port: int) -> None:
    """A service's health endpoint at its fastest: every request answered 200, then closed
    (the checker does not keep connections)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1:2] == ["target"]:
        asyncio.run(_target(int(sys.argv[2])))
