"""Record what a stock Eureka server replicates, as a fixture the replay test reads.

    python -m tests.peers.stock_items.capture [--project DIR | --jar JAR] [--out DIR]

The stock server (built by Maven from `--project`, tests/bench/eureka_server by default, or a
jar given) runs with this tool's recorder (recorder.py) as its only peer; the recorder relays
each request to a second node of the same jar, the replying peer, so the stock node is
answered by Eureka itself. The script (script.py) is then sent to the stock node's REST API,
one step at a time; after each, the tool waits until the stock node has sent nothing for
QUIET seconds (its batches leave within half a second of a change), then reads both nodes'
views (`GET apps`, JSON).

It writes `eureka-<eureka-core version>.json.gz` (gzipped: 400 kB of JSON, 10 kB of file) in
`--out` (this package's folder by default):

    {"eureka": {"core": "2.0.6", "springCloudNetflix": "4.3.0", ...},
     "steps": [{"name", "at_ms", "request": {"method", "path", "headers", "body"},
                "answer": {"status", "body"},
                "sent": [{"at_ms", "method", "path", "query", "headers", "body",
                          "status", "relayed", "answered", "peerAnswer"}, ...],
                "view": <the stock node's GET apps>,
                "peerView": <the replying peer's, or null where it is the same>}, ...]}

`sent` holds the requests the stock node made to its peer during the step (the batches,
decoded), `answered` what it was answered and `peerAnswer` what the replying peer said (they
differ where the step has the peer lose its heartbeats; a request withheld from the replying
peer has `relayed` false and no `peerAnswer`). Times and ports are as captured.

Java 17 and Maven are needed; it takes a minute or two, most of it the two JVMs' start.
The 1.10 line: `--project tests/peers/stock_items/eureka_1_10`.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import re
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from tests.helpers import free_port
from tests.peers.stock_items.recorder import Recorder
from tests.peers.stock_items.script import SCRIPT, Clients, Step
from tests.stock_clients.java import JavaService, build

HERE = Path(__file__).parent
DEFAULT_PROJECT = HERE.parents[1] / "bench" / "eureka_server"
QUIET = 2.5  # seconds without a request from the stock node that close a step
STEP_LIMIT = 30.0  # a step whose replication has not settled by then is recorded as it is
JSON = {"Accept": "application/json"}


def versions(jar: Path) -> dict[str, str]:
    """The versions of Eureka's and Spring's parts inside a Spring Boot jar."""
    found: dict[str, str] = {}
    wanted = {
        "core": r"eureka-core-(\d[\w.]*)\.jar",
        "springCloudNetflix": r"spring-cloud-netflix-eureka-server-(\d[\w.]*)\.jar",
        "springBoot": r"spring-boot-(\d[\w.]*)\.jar",
    }
    with zipfile.ZipFile(jar) as archive:
        for name in archive.namelist():
            base = name.rsplit("/", 1)[-1]
            for key, pattern in wanted.items():
                match = re.fullmatch(pattern, base)
                if match:
                    found[key] = match.group(1)
    return found


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _view(session: aiohttp.ClientSession, base: str) -> Any:
    async with session.get(f"{base}/eureka/apps", headers=JSON) as response:
        return await response.json()


async def _settled(recorder: Recorder, since_ms: int) -> None:
    """Wait until the stock node has sent nothing for QUIET seconds (or STEP_LIMIT)."""
    deadline = time.monotonic() + STEP_LIMIT
    while time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        if _now_ms() - max(since_ms, recorder.last_ms) >= QUIET * 1000:
            return


async def _run_step(
    step: Step,
    clients: Clients,
    stock: JavaService,
    replying: JavaService,
    recorder: Recorder,
    session: aiohttp.ClientSession,
) -> dict[str, Any]:
    at_ms = _now_ms()
    call = step.call(at_ms, clients)
    recorder.lose_heartbeats, recorder.withhold = step.lose_heartbeats, step.withhold
    async with session.request(
        call.method, f"{stock.base}/eureka/{call.path}", data=call.body, headers=call.headers
    ) as response:
        answer = {"status": response.status, "body": await response.text()}
    await _settled(recorder, at_ms)
    recorder.lose_heartbeats = recorder.withhold = False
    view, peer_view = await _view(session, stock.base), await _view(session, replying.base)
    return {
        "name": step.name,
        "at_ms": at_ms,
        "request": {
            "method": call.method,
            "path": call.path,
            "headers": call.headers,
            "body": None if call.body is None else call.body.decode(),
        },
        "answer": answer,
        "sent": recorder.take(),
        "view": view,
        "peerView": None if peer_view == view else peer_view,  # null: the same
    }


async def capture(jar: Path, out: Path, logs: Path) -> Path:
    """Run the script against a stock node of `jar`; the fixture's path."""
    recorder_port = free_port()
    common = ["--eureka.server.use-read-only-response-cache=false"]
    replying = JavaService(jar, logs / "replying.log", ready_path="/eureka/apps")
    stock = JavaService(jar, logs / "stock.log", ready_path="/eureka/apps")
    recorder = Recorder(replying.base)
    runner = web.AppRunner(recorder.app())
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", recorder_port).start()
        await replying.start(
            args=[
                f"--server.port={replying.port}",
                f"--eureka.client.service-url.defaultZone=http://127.0.0.1:{recorder_port}/b/eureka/",
                *common,
            ]
        )
        await stock.start(
            args=[
                f"--server.port={stock.port}",
                f"--eureka.client.service-url.defaultZone=http://127.0.0.1:{recorder_port}/eureka/",
                *common,
            ]
        )
        clients = Clients()
        steps: list[dict[str, Any]] = []
        async with aiohttp.ClientSession() as session:
            await _settled(recorder, _now_ms())
            started = {"name": "start", "sent": recorder.take()}
            for step in SCRIPT:
                steps.append(await _run_step(step, clients, stock, replying, recorder, session))
                print(f"{step.name}: {len(steps[-1]['sent'])} request(s)", file=sys.stderr)
    finally:
        stock.kill()
        replying.kill()
        await runner.cleanup()
    found = versions(jar)
    document = {"eureka": found, "start": started, "steps": steps}
    path = out / f"eureka-{found['core']}.json.gz"
    path.write_bytes(gzip.compress(orjson.dumps(document) + b"\n", mtime=0))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, default=DEFAULT_PROJECT)
    parser.add_argument("--jar", type=Path, help="a built jar (the project is then not built)")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    jar = args.jar
    if jar is None:
        build(args.project)
        jar = args.project / "target" / "eureka-server.jar"
    with tempfile.TemporaryDirectory(prefix="stock-items-") as logs:
        print(asyncio.run(capture(jar, args.out, Path(logs))))


if __name__ == "__main__":
    main()
