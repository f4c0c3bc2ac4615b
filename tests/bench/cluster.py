"""The cluster scenario: three peered nodes with stores, a whole fleet heartbeating, a deploy's
churn, readers, and one node SIGKILLed in the middle and started again.

In order:

* start: three node processes, each with its own store and the others as peers, started
  together.
* load: the fleet (`tests.bench.cluster_fleet`, a process of its own) registers every instance
  on its own node; then how long until every node held all of them, and had written them
  to its store (the workload starts once the load has settled so). From then on every
  instance heartbeats once every `interval` on its own node (failing over to the next when
  that one does not answer). The readers read from
  here on (`Reads`): DELTA_READERS stock clients reading the gzip delta once a second,
  spread over the nodes, and one full fetch every `full_interval`, gzip JSON and XML in turn,
  on the nodes in turn (a fleet's clients go on reading while others register). The
  workload starts once every node has answered a full fetch in each form: those first, cold
  reads (each encodes and compresses the whole registry) are reported apart, with the others
  made during the load.
* workload, for `seconds`: the heartbeats; CHURN_PER_SECOND registrations and as many
  cancels on nodes at random; the readers; on each node a heartbeat probe every
  PROBE_INTERVAL (a process per node, `scale_clients probe`); a watch stream on every node,
  timing each churned registration from its send until every other node's stream has it.
  `kill_at` seconds in, one node is SIGKILLed; `outage` seconds later it is started again on
  its store: seconds from its spawn until `/readyz`, until a first gzip JSON full fetch is
  answered, and until its digests are those of a peer.
* heal: the churn and the readers stop; the fleet heartbeats on for one `interval`, so that
  any registration a node lost is registered again by its instance, as it would be.
* judgement: once every node's digests agree, each node's whole registry against what the
  fleet was acknowledged: zombies (listed after an acknowledged cancel) and lost changes
  (acknowledged registrations missing). Zombies are counted at the end of the workload too.

The load generator stays light: prebuilt small requests on kept-alive connections, answers
left compressed, and no document the size of the registry parsed while anything is timed.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from tests.bench import processes
from tests.bench.scale_clients import run_helper
from tests.bench.scale_requests import (
    FORMS,
    REQUEST_TIMEOUT,
    Timings,
    new_session,
    new_status_session,
)
from tests.bench.scale_workload import _delta_fetches, _every
from tests.bench.scenarios import Plan, _percentile, _status
from tests.bench.store import _written

NODES = 3
VICTIM = 2  # the node killed and started again
DELTA_READERS = 30
PROBED = 300  # the probes heartbeat the first PROBED instances, which the churn never cancels
LEAD = 3.0  # seconds for the probes to open their connections before the workload
LEASE_SECONDS = 90
SETTLED = 1.0  # a cancel acknowledged this long before a count has had time to travel
POLL = 0.1  # seconds between reads while waiting for the nodes to hold or agree on something
AGREE_TIMEOUT = 60.0
LOADED_TIMEOUT = 120.0
FLEET_TIMEOUT = 900.0
LAG_WINDOW = 5.0  # a registration a stream has not shown by then counts as unseen


@dataclass(frozen=True)
class Sizes:
    instances: int
    apps: int
    interval: float  # between an instance's heartbeats
    seconds: float  # of the workload
    kill_at: float  # seconds into the workload
    outage: float
    full_interval: float = 5.0  # between two full fetches (of the nodes in turn)


SMOKE = Sizes(1_500, 15, interval=3.0, seconds=9.0, kill_at=3.0, outage=2.0, full_interval=1.0)


@dataclass
class Victim:
    """What happened to the node killed and started again, and when (monotonic seconds)."""

    killed: float | None = None
    ready: float | None = None
    cpu_before_kill: float = 0.0


async def cluster(plan: Plan) -> dict[str, Any]:
    sizes = (
        SMOKE
        if plan.smoke
        else Sizes(plan.scale_instances, plan.scale_apps, 30.0, 60.0, kill_at=20.0, outage=10.0)
    )
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as root:
        stores = [Path(root) / f"node{n}" for n in range(NODES)]
        for store in stores:
            store.mkdir()
        async with AsyncExitStack() as stack:
            nodes = await stack.enter_async_context(
                processes.cluster(NODES, data_dirs=stores, ready_path="/readyz")
            )
            figures = await _run(stack, nodes, stores, sizes, Path(root) / "fleet.json")
    return figures


async def _run(
    stack: AsyncExitStack,
    nodes: list[processes.Server],
    stores: list[Path],
    sizes: Sizes,
    out: Path,
) -> dict[str, Any]:
    spec = {
        "out": str(out),
        "urls": [node.url for node in nodes],
        "instances": sizes.instances,
        "apps": sizes.apps,
        "interval": sizes.interval,
        "lease_seconds": LEASE_SECONDS,
        "reserved": PROBED,
    }
    fleet = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.bench.cluster_fleet",
        json.dumps(spec),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert fleet.stdin is not None and fleet.stdout is not None
    reads = Reads(nodes, sizes.full_interval)
    try:
        async with new_session(0) as session:
            reading = asyncio.create_task(reads.run(session, time.monotonic()))
            loaded = json.loads(await asyncio.wait_for(fleet.stdout.readline(), FLEET_TIMEOUT))
            load = await _everywhere(nodes, sizes.instances, loaded["loaded"])
            async with new_status_session() as status:
                for node in nodes:  # each node's store has written the load
                    await _written(status, node)
            load["settled_after_seconds"] = round(time.monotonic() - loaded["loaded"]["ended"], 2)
            await asyncio.wait_for(reads.each_read.wait(), LOADED_TIMEOUT)
            start = time.monotonic() + LEAD
            reads.end = churn_end = start + sizes.seconds
            times = {"start": start, "churn_end": churn_end, "end": churn_end + sizes.interval}
            fleet.stdin.write(json.dumps(times).encode() + b"\n")
            await fleet.stdin.drain()
            workload = await _workload(stack, nodes, stores, sizes, start, session)
            await reading
        then = [await _listed(node) for node in nodes]  # during the heal: nothing is timed
        await asyncio.wait_for(fleet.wait(), FLEET_TIMEOUT)
        report = json.loads(out.read_text())
    finally:
        if fleet.returncode is None:
            fleet.kill()
        await fleet.wait()
    victim: Victim = workload.pop("victim")
    lag = _lags(report.pop("registered"), workload.pop("watched"), victim, start)
    cancels = {iid: acked for iid, _, acked in report.pop("cancels")}
    for figures, node in zip(reads.figures(start), workload["nodes"], strict=True):
        node.update(figures)
    return {
        "instances": sizes.instances,
        "apps": sizes.apps,
        "sizes": vars(sizes),
        "load": load,
        **workload,
        "lag": lag,
        "zombies_at_workload_end": [
            sum(1 for iid in ids if cancels.get(iid, at) < at - SETTLED) for at, ids in then
        ],
        **(await _judged(nodes, set(report.pop("live")), cancels)),
        "fleet": report,
    }


# Load ---------------------------------------------------------------------------------------


async def _everywhere(
    nodes: list[processes.Server], instances: int, loaded: dict[str, Any]
) -> dict[str, Any]:
    """The fleet's load, and seconds from its last registration until every node held all."""
    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + LOADED_TIMEOUT
        while time.monotonic() < deadline:
            sizes = [
                int((await _status(session, node))["generalStats"]["registry-size"])
                for node in nodes
            ]
            if min(sizes) >= instances:
                break
            await asyncio.sleep(POLL)
    seconds = loaded["ended"] - loaded["began"]
    return {
        "seconds": round(seconds, 2),
        "per_second": round(instances / seconds),
        "errors": loaded["errors"],
        "on_every_node_after_seconds": round(time.monotonic() - loaded["ended"], 2),
        "held": sizes,
    }


# The workload -------------------------------------------------------------------------------


async def _workload(
    stack: AsyncExitStack,
    nodes: list[processes.Server],
    stores: list[Path],
    sizes: Sizes,
    start: float,
    session: aiohttp.ClientSession,
) -> dict[str, Any]:
    """The probes, the watch streams and the victim's kill and restart, from `start` on for
    `sizes.seconds`; the readers are already reading (`Reads`)."""
    end = start + sizes.seconds
    victim = Victim()
    watched = [Watched() for _ in nodes]
    probe = {"instances": PROBED, "apps": sizes.apps, "start": start, "end": end}
    cpu_at_start, probes, restart, *_ = await asyncio.gather(
        _cpu_at(start, nodes),
        asyncio.gather(
            *(
                run_helper("probe", {**probe, "url": node.url}, LEAD + sizes.seconds + 60)
                for node in nodes
            )
        ),
        _kill_and_restart(stack, nodes, stores, victim, start + sizes.kill_at, sizes, session),
        *(_watch(session, node, end, seen) for node, seen in zip(nodes, watched, strict=True)),
    )
    elapsed = time.monotonic() - start
    cpu = [node.cpu_seconds() - before for node, before in zip(nodes, cpu_at_start, strict=True)]
    if victim.ready is not None:  # its first life's share, and all of its second's
        cpu[VICTIM] = victim.cpu_before_kill - cpu_at_start[VICTIM] + nodes[VICTIM].cpu_seconds()
    down = sizes.outage if victim.ready is None else victim.ready - (victim.killed or 0)
    return {
        "nodes": [
            {
                "probe": probed,
                "cpu_share": round(cpu[n] / (elapsed - (down if n == VICTIM else 0)), 2),
                "rss_bytes": nodes[n].rss_bytes(),
            }
            for n, probed in enumerate(probes)
        ],
        "restart": restart,
        "victim": victim,
        "watched": watched,
    }


async def _cpu_at(at: float, nodes: list[processes.Server]) -> list[float]:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    return [node.cpu_seconds() for node in nodes]


class Reads:
    """The readers: DELTA_READERS stock clients each reading the gzip delta once a second from
    their node, and one full fetch every `full_interval`, from the nodes in turn and in each form
    in turn. They read from the load's start, as a fleet's clients go on reading while others
    register, until `end`; their figures are split at the workload's start (those before
    it: "during the load", its first reads included)."""

    def __init__(self, nodes: list[processes.Server], full_interval: float) -> None:
        self.nodes = nodes
        self.full_interval = full_interval
        self.deltas = [Timings() for _ in nodes]
        self.fulls = [{"json+gzip": Timings(), "xml+gzip": Timings()} for _ in nodes]
        self.end = math.inf  # monotonic seconds, once known
        self.each_read = asyncio.Event()  # every node has answered a full fetch in each form

    async def run(self, session: aiohttp.ClientSession, first: float) -> None:
        names = list(self.fulls[0])

        async def full(tick: int) -> None:
            n, name = tick % NODES, names[tick // NODES % len(names)]
            url = f"{self.nodes[n].url}/eureka/apps/"
            await self.fulls[n][name].request(session, "GET", url, headers=FORMS[name])
            if all(t.ms for fulls in self.fulls for t in fulls.values()):
                self.each_read.set()

        def until() -> float:
            return self.end

        await asyncio.gather(
            _every(self.full_interval, first, until, full),
            *(
                _delta_fetches(
                    session,
                    self.nodes[i % NODES],
                    first + i / DELTA_READERS,
                    until,
                    self.deltas[i % NODES],
                )
                for i in range(DELTA_READERS)
            ),
        )

    def figures(self, start: float) -> list[dict[str, Any]]:
        """Each node's: those of the workload, and of the reads during the load beside."""
        figures = []
        for deltas, fulls in zip(self.deltas, self.fulls, strict=True):
            loading, working = deltas.split(start)
            split = {name: t.split(start) for name, t in fulls.items()}
            figures.append(
                {
                    "delta_json_gzip": working.summary() | {"slowest": working.slowest(start)},
                    "full": {name: after.summary() for name, (_, after) in split.items()},
                    "during_the_load": {
                        "delta_json_gzip": loading.summary(),
                        "full": {name: before.summary() for name, (before, _) in split.items()},
                    },
                }
            )
        return figures


# The node killed and started again ----------------------------------------------------------


async def _kill_and_restart(
    stack: AsyncExitStack,
    nodes: list[processes.Server],
    stores: list[Path],
    victim: Victim,
    at: float,
    sizes: Sizes,
    session: aiohttp.ClientSession,
) -> dict[str, Any]:
    """SIGKILL the victim at `at`, start it again on its store `outage` later: seconds from that
    spawn until ready, until its first gzip JSON full fetch is answered, and until its digests
    are those of a peer (read every POLL, so to within that; the churn makes a read now and
    then fall between a change and its copies)."""
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    node = nodes[VICTIM]
    victim.cpu_before_kill = node.cpu_seconds()
    node.process.kill()
    await node.process.wait()
    victim.killed = time.monotonic()
    await asyncio.sleep(sizes.outage)
    peers = ",".join(f"{node.url}/eureka/" for node in nodes)
    try:
        restarted = await stack.enter_async_context(
            processes.registry(
                urlsplit(node.url).port,
                ready_path="/readyz",
                ready_poll=0.01,
                store__data_dir=stores[VICTIM],
                peers__urls=peers,
            )
        )
    except RuntimeError as exc:  # it did not start in time, or exited
        return {"restart_error": str(exc)}
    victim.ready = time.monotonic()
    nodes[VICTIM] = restarted
    assert restarted.spawned_at is not None and restarted.ready_seconds is not None
    first = Timings()
    url = f"{restarted.url}/eureka/apps/"
    await first.request(session, "GET", url, headers=FORMS["json+gzip"])
    fetched = time.monotonic() - restarted.spawned_at
    agreed = await _agreement(session, nodes, VICTIM)
    return {
        "ready_seconds": round(restarted.ready_seconds, 2),
        "first_full_fetch_seconds": round(fetched, 2) if first.ms else None,
        "agreeing_seconds": None if agreed is None else round(agreed - restarted.spawned_at, 2),
    }


async def _agreement(
    session: aiohttp.ClientSession, nodes: list[processes.Server], node: int | None = None
) -> float | None:
    """When (monotonic) the digests of `node` and a peer's were first read equal, or with no
    `node` those of all; None if not within AGREE_TIMEOUT."""
    deadline = time.monotonic() + AGREE_TIMEOUT
    while time.monotonic() < deadline:
        digests = await asyncio.gather(*(_digest(session, other) for other in nodes))
        if node is None:
            if all(digest == digests[0] is not None for digest in digests):
                return time.monotonic()
        elif digests[node] is not None and digests.count(digests[node]) > 1:
            return time.monotonic()
        await asyncio.sleep(POLL)
    return None


async def _digest(session: aiohttp.ClientSession, node: processes.Server) -> dict[str, str] | None:
    try:
        async with session.get(f"{node.url}/eureka/peerreplication/digest") as response:
            if response.status != 200:
                return None
            digests: dict[str, str] = orjson.loads(await response.read())["applications"]
            return digests
    except (aiohttp.ClientError, TimeoutError):
        return None


# Replication lag ----------------------------------------------------------------------------


@dataclass
class Watched:
    """When each instance was first ADDED on one node's watch stream, and when the stream was
    open (a registration made while it was not is not one it could show)."""

    added: dict[str, float] = field(default_factory=dict)
    open: list[list[float]] = field(default_factory=list)  # [from, until]


async def _watch(
    session: aiohttp.ClientSession, node: processes.Server, end: float, watched: Watched
) -> None:
    """Read the node's watch stream until LAG_WINDOW past `end`, opening it again whenever it
    closes (the victim's, while the victim is down and again once it is back)."""
    until = end + LAG_WINDOW
    while time.monotonic() < until:
        try:
            left = aiohttp.ClientTimeout(total=until - time.monotonic())
            async with session.get(f"{node.url}/eureka/watch", timeout=left) as stream:
                if stream.status != 200:
                    raise aiohttp.ClientError(f"status {stream.status}")
                span = [time.monotonic(), math.inf]  # open until it ends
                watched.open.append(span)
                try:
                    while event := await stream.content.readuntil(b"\n\n"):
                        if event.startswith(b"event: ADDED\n") or b"\nevent: ADDED\n" in event:
                            iid = orjson.loads(event.split(b"data: ", 1)[1])["instanceId"]
                            watched.added.setdefault(iid, time.monotonic())
                finally:
                    span[1] = time.monotonic()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            pass
        await asyncio.sleep(POLL)


def _lags(
    registered: list[list[Any]], watched: list[Watched], victim: Victim, start: float
) -> dict[str, Any]:
    """Milliseconds from each churned registration's send until each other node's stream showed
    it; of the streams open from the send for LAG_WINDOW, and of registrations not taken by the
    victim in the second before it was killed (it may not have passed them on). The slowest
    say when they were sent (seconds from `start`), from which node to which, and how long the
    first node took to answer."""
    ms: list[float] = []
    slowest: list[tuple[float, float, int, int, float]] = []
    unseen = 0
    for iid, taker, sent, acked in registered:
        if taker == VICTIM and _about_killed(sent, victim):
            continue
        for n, seen in enumerate(watched):
            if n == taker or not any(a <= sent and sent + LAG_WINDOW <= b for a, b in seen.open):
                continue
            if iid in seen.added:
                ms.append(1000 * (seen.added[iid] - sent))
                slowest.append((ms[-1], sent - start, taker, n, acked - sent))
            else:
                unseen += 1
    return {
        "samples": len(ms),
        "unseen": unseen,
        "p50_ms": _percentile(ms, 0.50),
        "p99_ms": _percentile(ms, 0.99),
        "max_ms": _percentile(ms, 1.0),
        "slowest": [
            {
                "sent_at_s": round(at, 2),
                "ms": round(lag, 1),
                "from": taker,
                "to": n,
                "answered_ms": round(1000 * answered, 1),
            }
            for lag, at, taker, n, answered in sorted(slowest, reverse=True)[:12]
        ],
    }


def _about_killed(sent: float, victim: Victim) -> bool:
    """Sent within the second before the victim was killed, or while it was down."""
    if victim.killed is None or sent < victim.killed - 1:
        return False
    return victim.ready is None or sent <= victim.ready


# Judgement ----------------------------------------------------------------------------------


async def _listed(node: processes.Server) -> tuple[float, set[str]]:
    """When, and the ids of every instance the node listed then."""
    at = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"{node.url}/eureka/apps/", headers=FORMS["json"]) as response,
    ):
        document = orjson.loads(await response.read())
    return at, {
        instance["instanceId"]
        for app in document["applications"]["application"]
        for instance in app["instance"]
    }


async def _judged(
    nodes: list[processes.Server], live: set[str], cancels: dict[str, float]
) -> dict[str, Any]:
    """Once the nodes agree (the fleet has stopped): on each, the zombies (listed after an
    acknowledged cancel) and the lost (acknowledged, live, not listed)."""
    started = time.monotonic()
    async with new_session(0) as session:
        agreed = await _agreement(session, nodes)
    listed = [(await _listed(node))[1] for node in nodes]
    return {
        "agreed_after_seconds": None if agreed is None else round(agreed - started, 2),
        "held": [len(ids) for ids in listed],
        "zombies": [len(ids & cancels.keys()) for ids in listed],
        "lost": [len(live - ids) for ids in listed],
        "live": len(live),
        "cancelled": len(cancels),
    }
