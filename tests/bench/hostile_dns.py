"""A node given a hostile `peer_dns` answer: what it costs in memory, CPU and readiness.

One server with credentials on every plane (and default timings otherwise) looks its peers up
in a DNS server on loopback that answers 300 A records: its own address, 294 loopback
addresses where nothing listens, and five no peer can have (a metadata, a link-local, two
multicast and the broadcast address). Fifty instances heartbeat every 0.5 s (100 a second)
while it runs for SECONDS; its RSS every 15 s, its CPU over the last two thirds, when
`/readyz` first answered 200 and its last size are printed. Everything is on loopback.

Run it from the checkout whose code is measured (the server imports from there), against
two builds to compare them:

    python -m tests.bench.hostile_dns [SECONDS]
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.dns_server import StubDns
from tests.helpers import free_port, instance_doc
from tests.processes import ServerProcess

NAME = "registry-peers.test"
ANSWER = [
    "127.0.0.1",
    *(f"127.0.{n // 250 + 1}.{n % 250 + 1}" for n in range(294)),
    "169.254.169.254",
    "169.254.7.7",
    "224.0.0.251",
    "239.1.2.3",
    "255.255.255.255",
]
CLIENT = {"Authorization": "Basic " + base64.b64encode(b"svc:s3cret").decode()}
INSTANCES, INTERVAL = 50, 0.5


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def heartbeats(session: aiohttp.ClientSession, node: ServerProcess) -> None:
    for i in range(INSTANCES):
        doc = {"instance": instance_doc("LOAD", f"i-{i}")}
        async with session.post(node.eureka + "apps/LOAD", json=doc, headers=CLIENT) as r:
            assert 204 == r.status, r.status
    while True:
        for i in range(INSTANCES):
            async with session.put(node.eureka + f"apps/LOAD/i-{i}", headers=CLIENT):
                pass
        await asyncio.sleep(INTERVAL)


async def measure(seconds: float, log: Path) -> None:
    stub = await StubDns().start()
    stub.set(NAME, ANSWER)
    port = free_port()
    settings = {
        "store__enabled": "false",
        "credentials__clients": "svc:s3cret",
        "credentials__admins": "ops:adm1n-pw",
        "credentials__peer": "peer:p33r-pw",
        "peers__dns_name": NAME,
        "peers__dns_port": port,
        "peers__dns_nameservers": stub.server,
        "logging__format": "json",
    }
    node = await ServerProcess(log, port, settings=settings).start(ready="/healthz")
    started, ready_after, samples = time.monotonic(), None, []
    try:
        async with aiohttp.ClientSession() as session:
            load = asyncio.ensure_future(heartbeats(session, node))
            while (elapsed := time.monotonic() - started) < seconds:
                async with session.get(node.base + "/readyz") as response:
                    size = len(await response.read())
                    if response.status == 200 and ready_after is None:
                        ready_after = elapsed
                samples.append((elapsed, rss_mb(node.pid), cpu_seconds(node.pid), size))
                await asyncio.sleep(1)
            load.cancel()
    finally:
        await node.kill()
        stub.close()
    t_from, _, cpu_from, _ = next(s for s in samples if s[0] >= seconds / 3)
    t_to, rss_to, cpu_to, size = samples[-1]
    print("rss MB by second:", [(round(t), round(rss)) for t, rss, _, _ in samples[::15]])
    print(
        f"rss {samples[0][1]:.0f} -> {rss_to:.0f} MB, "
        f"cpu {100 * (cpu_to - cpu_from) / (t_to - t_from):.1f} % of a core "
        f"({t_from:.0f}-{t_to:.0f} s), "
        f"ready after {f'{ready_after:.1f} s' if ready_after is not None else f'> {seconds:g} s'}, "
        f"/readyz {size} bytes"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(
            measure(float(sys.argv[1]) if len(sys.argv) > 1 else 90, Path(directory) / "node.log")
        )
