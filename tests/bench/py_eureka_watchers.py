"""Unmodified py-eureka-client EurekaClients watching one registry, in a process of their own.

Usage: python -m tests.bench.py_eureka_watchers SPEC_JSON

The stock polling beside the `client` scenario's DiscoveryClients. `clients` discovery-only
EurekaClients (`should_register=False`) are started `interval / clients` seconds apart, so
their delta fetches (every `interval` seconds, the library's heartbeat thread: 30 s by default,
as Eureka's registryFetchIntervalSeconds) are spread evenly over one interval, as a fleet's
are. Once all have made their start-up full fetch it prints `ready`, and from the `go` line on
stdin reads each client's `applications` every POLL seconds, noting when each of the
`expected` [app, id] pairs first shows in it, until all have seen all or `seconds` after `go`;
once the runner has closed stdin it writes the sightings to the file `out` as JSON, as
`tests.bench.client_watchers` does. POLL adds up to 10 ms to each sighting, nothing next to
the interval.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

# The library logs to stdout: `ready` gets the real stdout, its logs go to stderr.
ANSWERS = sys.stdout
sys.stdout = sys.stderr

from py_eureka_client.eureka_client import EurekaClient  # noqa: E402

from tests.bench.client_watchers import runner_pipe, wait_closed, wait_go  # noqa: E402

POLL = 0.01
SCAN_EVERY = 10  # polls: see `observe`

Sightings = dict[str, list[float]]  # instance id: when each client first saw it


def shown(client: EurekaClient, app: str, iid: str) -> bool:
    """Whether `iid` is in the client's copy (merged by its own thread: read under its locks)."""
    application = client.applications.get_application(app)
    return application is not None and application.get_instance(iid) is not None


async def observe(spec: dict[str, Any]) -> dict[str, Any]:
    url, interval, count = str(spec["url"]), float(spec["interval"]), int(spec["clients"])
    expected = [(str(app), str(iid)) for app, iid in spec["expected"]]
    seen: Sightings = {iid: [] for _, iid in expected}
    clients: list[EurekaClient] = []
    try:
        for k in range(count):
            if k:
                await asyncio.sleep(interval / count)
            client = EurekaClient(
                eureka_server=url,
                should_register=False,
                renewal_interval_in_secs=interval,  # its fetch interval too
            )
            await client.start()  # the full fetch; its delta thread fetches `interval` later
            clients.append(client)
        pipe = await runner_pipe()
        print("ready", file=ANSWERS, flush=True)
        await wait_go(pipe, float(spec["go_timeout"]))
        missing = [list(expected) for _ in clients]
        deadline = time.monotonic() + float(spec["seconds"])
        # Cheap polls, so as not to slow the DiscoveryClients beside: the ids come in the order
        # registered, so the first one missing tells when a fetch brought news; every
        # SCAN_EVERY polls all are looked at, should some come out of order.
        for poll in itertools.count():
            if not any(missing) or time.monotonic() > deadline:
                break
            now = time.monotonic()
            for client, left in zip(clients, missing, strict=True):
                if left and (poll % SCAN_EVERY == 0 or shown(client, *left[0])):
                    for app, iid in [pair for pair in left if shown(client, *pair)]:
                        seen[iid].append(now)
                        left.remove((app, iid))
            await asyncio.sleep(POLL)
        await wait_closed(pipe, deadline - time.monotonic())
        return {"seen": seen, "timed_out": sum(1 for left in missing if left)}
    finally:
        for client in clients:  # its thread is a daemon: it ends with the process
            await client.stop()


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    result = asyncio.run(observe(spec))
    Path(spec["out"]).write_text(json.dumps(result))
