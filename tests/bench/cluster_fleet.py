"""The cluster scenario's fleet: every instance registering, heartbeating and failing over as a
stock client does, and a deploy's churn, in a process of its own.

`python -m tests.bench.cluster_fleet SPEC_JSON`, then on stdin one JSON line of times:

1. It registers every instance on its own node (instance k's is node k % nodes), CLIENTS
   requests at a time per node, and prints `{"loaded": {...}}`. From then on it sends each
   live instance's heartbeat once every `interval`, spread evenly (instance k's phase is its
   place in the fleet).
2. It reads `{"start": s, "churn_end": c, "end": e}` (CLOCK_MONOTONIC, one clock for the
   machine). From `start` until `churn_end` it registers CHURN_PER_SECOND new instances and
   cancels as many, each on a node at random; the heartbeats stop at `end`.
3. It writes its report, JSON, to the spec's `out`: what was acknowledged and when, for the
   runner to judge every node's registry against.

As a stock client does, a request a node does not answer (connection refused or broken) goes
to the next node in turn, and a node that failed is passed over for DOWN_SECONDS; a heartbeat
answered 404 registers the instance again on the node that answered it. An instance is never
heartbeated once its cancel is sent, and never cancelled while its heartbeat is out, so every
cancel is the instance's last word: one listed afterwards is a zombie.

Plain HTTP/1.1 over asyncio streams, with each node's connections kept alive and reused
(`scale_clients.register_part` says why not aiohttp).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from registry.__main__ import new_event_loop
from tests.bench.scale_clients import _answer, _post
from tests.bench.scale_requests import heartbeat_path, registration, scale_instance
from tests.bench.scenarios import _percentile

CLIENTS = 32  # registering at once per node during the load
CONNECTIONS = 64  # at most, per node, once loaded
CHURN_PER_SECOND = 10  # registrations, and as many cancels
DOWN_SECONDS = 1.0  # a node that failed is passed over this long
TICK = 0.01  # heartbeats are sent in batches this far apart
REQUEST_TIMEOUT = 30.0


@dataclass
class Node:
    """One node as the fleet sees it: its connections, and until when it is passed over."""

    url: str
    limit: asyncio.Semaphore
    idle: collections.deque[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(
        default_factory=collections.deque
    )
    down_until: float = 0.0
    counts: collections.Counter[str] = field(default_factory=collections.Counter)

    async def send(self, request: bytes) -> int | None:
        """One request on a kept-alive connection; its status, or None if the node did not
        answer (the connection is then dropped and the node passed over a while)."""
        target = urlsplit(self.url)
        async with self.limit:
            try:
                if self.idle:
                    reader, writer = self.idle.popleft()
                else:
                    reader, writer = await asyncio.open_connection(target.hostname, target.port)
            except OSError:
                self.failed()
                return None
            try:
                writer.write(request)
                status = await asyncio.wait_for(_answer(reader), REQUEST_TIMEOUT)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
                writer.close()
                self.failed()
                return None
            self.idle.append((reader, writer))
            return status

    def failed(self) -> None:
        """Pass the node over a while, and drop its idle connections: a node that failed has
        most likely lost them all (killed, or restarted since)."""
        self.down_until = time.monotonic() + DOWN_SECONDS
        while self.idle:
            self.idle.popleft()[1].close()


@dataclass
class Fleet:
    nodes: list[Node]
    apps: int
    lease_seconds: int
    renewal_seconds: int
    live: list[int] = field(default_factory=list)  # instance numbers, in heartbeat order
    home: dict[int, int] = field(default_factory=dict)  # the node each churned one chose
    cancelled: set[int] = field(default_factory=set)  # cancels sent: no heartbeat after
    busy: set[int] = field(default_factory=set)  # a heartbeat out: not to be cancelled now
    registered: list[list[Any]] = field(default_factory=list)  # [id, node, sent, acked]
    cancels: list[list[Any]] = field(default_factory=list)  # [id, node, acked]
    unacknowledged: list[str] = field(default_factory=list)  # cancels no node answered 200
    reregistered: int = 0
    failed_over: int = 0
    unanswered: int = 0  # no node answered a heartbeat

    def registration(self, k: int, node: Node) -> bytes:
        # The scenario's lease, not the bench's default of an hour: a zombie lingers as it would
        path, body = registration(k, self.apps, (self.renewal_seconds, self.lease_seconds))
        return _post(urlsplit(node.url).netloc, path, body)

    def in_turn(self, first: int) -> list[Node]:
        """The nodes from `first` on, those passed over at the end, as a client fails over."""
        now = time.monotonic()
        turn = self.nodes[first:] + self.nodes[:first]
        return sorted(turn, key=lambda node: node.down_until > now)

    async def heartbeat(self, k: int) -> None:
        self.busy.add(k)
        try:
            path = heartbeat_path(k, self.apps)
            for tried, node in enumerate(self.in_turn(self.home.get(k, k % len(self.nodes)))):
                netloc = urlsplit(node.url).netloc
                request = f"PUT {path} HTTP/1.1\r\nHost: {netloc}\r\nContent-Length: 0\r\n\r\n"
                status = await node.send(request.encode())
                if status is None:
                    continue
                self.failed_over += tried > 0
                node.counts[f"heartbeat {status}"] += 1
                if status == 404 and k not in self.cancelled:
                    self.reregistered += 1
                    again = await node.send(self.registration(k, node))
                    node.counts[f"re-registration {again}"] += 1
                return
            self.unanswered += 1
        finally:
            self.busy.discard(k)

    async def register(self, k: int) -> None:
        """A new instance on a node at random (the next in turn if that one fails)."""
        sent = time.monotonic()
        for node in self.in_turn(random.randrange(len(self.nodes))):
            if await node.send(self.registration(k, node)) == 204:
                index = self.nodes.index(node)
                self.home[k] = index
                self.live.append(k)
                iid = scale_instance(k, self.apps)[1]
                self.registered.append([iid, index, sent, time.monotonic()])
                return

    async def cancel(self, reserved: int) -> None:
        """A live instance at random, past the first `reserved` (the probes'), cancelled."""
        while True:
            k = random.choice(self.live)
            if k >= reserved and k not in self.cancelled and k not in self.busy:
                break
        self.cancelled.add(k)
        app, iid, _ = scale_instance(k, self.apps)
        for node in self.in_turn(random.randrange(len(self.nodes))):
            netloc = urlsplit(node.url).netloc
            request = f"DELETE /eureka/apps/{app}/{iid} HTTP/1.1\r\nHost: {netloc}\r\n\r\n"
            status = await node.send(request.encode())
            if status is None:
                continue
            node.counts[f"cancel {status}"] += 1
            if status == 200:
                self.cancels.append([iid, self.nodes.index(node), time.monotonic()])
                return
            break  # refused (a 404: not there yet): no cancel to hold any node to
        self.unacknowledged.append(iid)


async def load(fleet: Fleet, instances: int) -> dict[str, Any]:
    """Every instance registered on its own node, CLIENTS at a time per node."""
    count = len(fleet.nodes)
    errors: collections.Counter[str] = collections.Counter()

    async def client(n: int, numbers: Iterator[int]) -> None:
        node = fleet.nodes[n]
        for k in numbers:
            status = await node.send(fleet.registration(k, node))
            if status != 204:
                errors[f"status {status}"] += 1

    began = time.monotonic()
    async with asyncio.TaskGroup() as group:
        for n in range(count):
            numbers = iter(range(n, instances, count))
            for _ in range(CLIENTS):
                group.create_task(client(n, numbers))
    fleet.live.extend(range(instances))
    return {"began": began, "ended": time.monotonic(), "errors": dict(errors)}


async def heartbeats(fleet: Fleet, start: float, end: Callable[[], float], interval: float) -> int:
    """Each live instance's heartbeat once every `interval`, in batches TICK apart, until what
    `end` says; how many were sent."""
    sent: set[asyncio.Task[None]] = set()
    cursor, owed, total = 0, 0.0, 0
    for tick in itertools.count():
        due = start + tick * TICK
        if due >= end():
            break
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        owed += len(fleet.live) * TICK / interval
        while owed >= 1:
            owed -= 1
            cursor = (cursor + 1) % len(fleet.live)
            k = fleet.live[cursor]
            if k in fleet.cancelled:
                continue
            task = asyncio.create_task(fleet.heartbeat(k))
            sent.add(task)
            task.add_done_callback(sent.discard)
            total += 1
    await asyncio.gather(*sent)
    return total


async def churn(
    fleet: Fleet, fresh: Iterator[int], start: float, end: float, reserved: int
) -> None:
    """CHURN_PER_SECOND registrations and as many cancels, each sent when due."""
    out: list[asyncio.Task[None]] = []
    for tick in itertools.count():
        due = start + tick / CHURN_PER_SECOND
        if due >= end:
            break
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        out.append(asyncio.create_task(fleet.register(next(fresh))))
        out.append(asyncio.create_task(fleet.cancel(reserved)))
    await asyncio.gather(*out)


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    fleet = Fleet(
        [Node(url, asyncio.Semaphore(CONNECTIONS)) for url in spec["urls"]],
        spec["apps"],
        spec["lease_seconds"],
        round(spec["interval"]) or 1,
    )
    loaded = await load(fleet, spec["instances"])
    times = {"end": math.inf}
    beating = asyncio.create_task(
        heartbeats(fleet, time.monotonic(), lambda: times["end"], spec["interval"])
    )
    print(json.dumps({"loaded": loaded}), flush=True)
    times = json.loads(await asyncio.to_thread(sys.stdin.readline))
    cpu = time.process_time()
    fresh = itertools.count(spec["instances"])
    await churn(fleet, fresh, times["start"], times["churn_end"], spec["reserved"])
    sent = await beating
    lags = [1000 * (acked - sent_at) for _, _, sent_at, acked in fleet.registered]
    return {
        "heartbeats": sent,
        "unanswered": fleet.unanswered,
        "failed_over": fleet.failed_over,
        "reregistered": fleet.reregistered,
        "registered": fleet.registered,
        "registration_p99_ms": _percentile(lags, 0.99),
        "cancels": fleet.cancels,
        "cancels_unacknowledged": fleet.unacknowledged,
        "live": [scale_instance(k, fleet.apps)[1] for k in fleet.live if k not in fleet.cancelled],
        "by_node": [dict(node.counts) for node in fleet.nodes],
        "cpu_seconds": round(time.process_time() - cpu, 2),
    }


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        report = runner.run(run(spec))
    with open(spec["out"], "w") as out:  # too long a line for the runner's pipe
        json.dump(report, out)
