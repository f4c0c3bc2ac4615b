"""The scale scenario's load-generating helper processes, and how the scenario runs them.

`python -m tests.bench.scale_clients register|probe SPEC_JSON` runs one and prints its report,
one JSON line:

* register: the registering clients of the initial load, each on a keep-alive connection of
  its own, sending registrations encoded beforehand.
* probe: a heartbeat every PROBE_INTERVAL, each timed from when it fell due.

Both speak plain HTTP/1.1 over asyncio streams, not aiohttp (`register_part` says why).
`run_helper` spawns one from the scenario and reads its report.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from registry.__main__ import new_event_loop
from tests.bench.scale_requests import REQUEST_TIMEOUT, Timings, heartbeat_path, registration
from tests.bench.scenarios import _percentile

CLIENTS = 64  # registering at once during the load
REGISTERING_PROCESSES = 1  # raise it if the report shows the one near a CPU second a second
PROBE_INTERVAL = 0.01
PROBE_CONNECTIONS = 1000  # opened beforehand: enough for the probes of a 10 s stall
# Connections opened at once, within the server's listen queue (128); also how many the
# workload's other requests have open beforehand
CONNECT_BATCH = 100
PROBE_SLOWEST = 10  # the slowest probes are reported with when they were due


def machine_cpu_seconds() -> float:
    """CPU seconds every process on the machine has used (all cores, stolen time counted as
    used), from /proc/stat: what the server and this benchmark could not have."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


async def run_helper(mode: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run `python -m tests.bench.scale_clients MODE SPEC`, killed after `timeout`; its
    JSON line."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.bench.scale_clients",
        mode,
        json.dumps(spec),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        stdout, _ = await asyncio.wait_for(process.communicate(), timeout)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"the {mode} process exited with {process.returncode}")
    report: dict[str, Any] = json.loads(stdout.decode().splitlines()[-1])
    return report


# Registering clients ------------------------------------------------------------------------


async def register_part(spec: dict[str, Any]) -> dict[str, Any]:
    """The registering process: its share of the instances, CLIENTS / REGISTERING_PROCESSES
    at a time, each client one keep-alive connection sending requests encoded beforehand.

    Plain HTTP/1.1 over asyncio streams, not aiohttp: aiohttp's client spent about three times
    the CPU per request (measured 280 against 90 µs), which on two cores it takes from the
    server. A client whose connection fails or times out stops; the others go on.
    """
    target = urlsplit(spec["url"])
    requests = iter(
        [
            _post(target.netloc, *registration(k, spec["apps"]))
            for k in range(spec["part"], spec["instances"], REGISTERING_PROCESSES)
        ]
    )
    timings = Timings()

    async def client() -> None:
        reader, writer = await asyncio.open_connection(target.hostname, target.port)
        try:
            for request in requests:
                started = time.perf_counter()
                writer.write(request)
                status = await asyncio.wait_for(_answer(reader), REQUEST_TIMEOUT)
                if status == 204:
                    timings.ms.append(1000 * (time.perf_counter() - started))
                else:
                    timings.failed(f"status {status}")
        except TimeoutError:
            timings.timeouts += 1
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            timings.failed(type(exc).__name__)
        finally:
            writer.close()

    began, cpu, machine_began = time.monotonic(), time.process_time(), machine_cpu_seconds()
    await asyncio.gather(*(client() for _ in range(CLIENTS // REGISTERING_PROCESSES)))
    ended, machine_ended = time.monotonic(), machine_cpu_seconds()
    summary = timings.summary()
    return {
        "registered": summary["count"],
        **{key: summary[key] for key in ("errors", "error_kinds", "timeouts", "p50_ms", "p99_ms")},
        "began": began,
        "ended": ended,
        "cpu_seconds": time.process_time() - cpu,
        "machine_cpu_began": machine_began,
        "machine_cpu_ended": machine_ended,
    }


def _post(host: str, path: str, body: bytes) -> bytes:
    """A whole HTTP/1.1 POST of a JSON `body`, ready to write."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _answer(reader: asyncio.StreamReader) -> int:
    """Read one HTTP/1.1 answer, its body by its Content-Length (the registry always sends one,
    or no body: a 204); its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    lower = head.lower()
    at = lower.find(b"\r\ncontent-length:")
    if at >= 0:
        await reader.readexactly(int(lower[at + 17 : lower.index(b"\r\n", at + 2)]))
    return int(head[9:12])


# The probe ----------------------------------------------------------------------------------


async def _warm(
    host: str | None, port: int | None, netloc: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that has made one request (`/healthz`): an idle kept-alive connection,
    which the server keeps, where one that never sent a request is closed at the server's
    request_head_timeout."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET /healthz HTTP/1.1\r\nHost: {netloc}\r\n\r\n".encode())
    await _answer(reader)
    return reader, writer


async def probe(spec: dict[str, Any]) -> dict[str, Any]:
    """The probing process: a heartbeat every PROBE_INTERVAL until `end`, over the instances in
    turn, each timed from when it fell due, whether or not the ones before had their answers.

    Each goes out on a keep-alive connection of its own, as each of a fleet's clients has one:
    PROBE_CONNECTIONS are opened beforehand and taken in turn. Should a stall hold up more
    than that, a new connection is opened (and counted): it waits for the server to accept
    it, and with the listen queue full, for the kernel's SYN retransmissions (1, 3, 7, ... s).
    """
    target = urlsplit(spec["url"])
    apps, instances = spec["apps"], spec["instances"]
    idle: collections.deque[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = collections.deque()
    for _ in range(0, PROBE_CONNECTIONS, CONNECT_BATCH):  # within the server's listen queue
        idle.extend(
            await asyncio.gather(
                *(_warm(target.hostname, target.port, target.netloc) for _ in range(CONNECT_BATCH))
            )
        )
    due: list[float] = []  # seconds into the run
    ms: list[float] = []
    failures = Timings()  # counts what failed: the times are kept above
    opened = 0  # connections opened in the run: more were needed than PROBE_CONNECTIONS

    async def connection() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        nonlocal opened
        if idle:
            return idle.popleft()
        opened += 1
        return await asyncio.open_connection(target.hostname, target.port)

    async def heartbeat(k: int, at: float) -> None:
        path = heartbeat_path(k % instances, apps)
        try:
            reader, writer = await connection()
        except OSError as exc:
            failures.failed(type(exc).__name__)
            return
        try:
            head = f"PUT {path} HTTP/1.1\r\nHost: {target.netloc}\r\nContent-Length: 0\r\n\r\n"
            writer.write(head.encode())
            status = await asyncio.wait_for(_answer(reader), REQUEST_TIMEOUT)
        except TimeoutError:
            failures.timeouts += 1
            writer.close()
            return
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            failures.failed(type(exc).__name__)
            writer.close()
            while idle:  # a server that broke one has most likely lost all (killed, restarted)
                idle.popleft()[1].close()
            return
        idle.append((reader, writer))
        if status != 200:
            failures.failed(f"status {status}")
            return
        due.append(at - start)
        ms.append(1000 * (time.monotonic() - at))

    cpu = time.process_time()
    start = spec["start"]  # or, should this process be late, its first due probe
    first = max(0, math.ceil((time.monotonic() - start) / PROBE_INTERVAL))
    sent: list[asyncio.Task[None]] = []
    for k in itertools.count(first):
        at = start + k * PROBE_INTERVAL
        if at >= spec["end"]:
            break
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        sent.append(asyncio.create_task(heartbeat(k, at)))
    await asyncio.gather(*sent)
    for _, writer in idle:
        writer.close()
    slowest = sorted(zip(ms, due, strict=True), reverse=True)[:PROBE_SLOWEST]
    by_second: dict[int, float] = {}
    for at, m in zip(due, ms, strict=True):
        by_second[int(at)] = max(m, by_second.get(int(at), 0.0))
    return {
        "sent": len(sent),
        "answered": len(ms),
        "errors": failures.errors,
        "error_kinds": dict(failures.error_kinds),
        "timeouts": failures.timeouts,
        "opened": opened,
        "p50_ms": _percentile(ms, 0.50),
        "p99_ms": _percentile(ms, 0.99),
        "max_ms": _percentile(ms, 1.0),
        "slowest": [{"due_at_s": round(at, 2), "ms": round(m, 1)} for m, at in slowest],
        "max_ms_by_second": [
            round(by_second.get(s, 0.0), 1) for s in range(max(by_second, default=-1) + 1)
        ],
        "cpu_seconds": round(time.process_time() - cpu, 2),
    }


HELPERS = {"register": register_part, "probe": probe}

if __name__ == "__main__":
    mode, spec = sys.argv[1], json.loads(sys.argv[2])
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        print(json.dumps(runner.run(HELPERS[mode](spec))))
