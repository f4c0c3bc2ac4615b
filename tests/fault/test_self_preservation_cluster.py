"""Self-preservation where one node's view is not the whole story: three peered nodes that half
the heartbeats stop reaching at once, and one node whose leases claim more renewals than they
send. Real server processes on loopback, in real time.

A cluster (`TestCluster`). Sixty instances register, spread over three nodes that list each
other, and heartbeat round the nodes: each heartbeat to the next node in turn, which replicates
it to the other two, and a heartbeat answered 404 followed by a registration there, as stock
clients do. Once every node has counted a window of renewals and evicts, every other instance
falls silent. For a registry of n = 60 the cap is n - int(n x 0.85) = 9: no node evicts more
(its `registry_evictions_total`), and every node lists the rest of the silent half (at least 21)
for as long as the silence lasts, whatever it learns of the others' evictions (the nodes compare
digests every second, tests/nodes.py); no recount accepts the drop meanwhile
(`renewal_threshold_update_interval` is 15 min). Then the silent half heartbeat again: nothing
more is evicted, and every node lists all sixty. Two lease shapes, each a test:

- Eureka's, a tenth as long: heartbeats every 3 s, leases of 9 s, renewals counted over a 6 s
  `renewal_window`, a sweep a second. Heartbeats until every node evicts (one or two windows,
  about 10 s); silence until six windows after the silent leases ran out (about 45 s);
  heartbeats again for two windows and a second. About 70 s.
- Short leases on Eureka's minute: heartbeats every second, leases of 5 s, renewals counted over
  60 s. Heartbeats for a little over a minute, since a node holds eviction until its first
  window is counted; silence for 70 s, over a window after the silent leases ran out;
  heartbeats again for 10 s. About 2.5 min.

One node (`TestClaimedRenewals`), renewals counted over 6 s windows from its start (t = 0, when
it answers): twelve instances renew every second, as their leases (1 s, 5 s) say; three with
the same leases renew only every 2.9 s, a third as often as they claim; one more renews every
second from t = 0.5 and stops after its renewal at t = 13.5, 1.5 s into the third window. That
window closes at t = 18, before its lease runs out at 18.5, already counting its silence and the
three's shortfall; a registry that takes the three at their word holds eviction from then on,
for good. The dead one must be evicted within four windows of its lease running out (t = 42.5),
and nothing else at all. About 25 s when it is; 45 s when it is not.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest

from tests.helpers import JSON, eventually, instance_doc

pytestmark = pytest.mark.slow

APP = "ORDERS"
SWEEP = 1  # eviction_interval
RECOUNT = 900  # renewal_threshold_update_interval: no recount during a test
QUICK = aiohttp.ClientTimeout(total=5)


def _cap(size: int) -> int:
    """The most one node may evict from a registry of `size` while self-preservation applies."""
    return size - int(size * 0.85)


class _Clients:
    """The test's Eureka clients, on one session: each heartbeat to the next node in turn, and
    on a 404 a registration there, as stock clients do."""

    def __init__(
        self, session: aiohttp.ClientSession, urls: Sequence[str], lease: dict[str, int]
    ) -> None:
        self.session = session
        self.urls = urls
        self.lease = lease
        self.silent: set[str] = set()  # instances whose heartbeats stopped
        self.renewed_at: dict[str, float] = {}  # each instance's last 200, monotonic
        self.registered_again_at: dict[str, float] = {}  # each one's last registration after a 404
        self.failures: list[str] = []  # answers no client expects

    async def register(self, iid: str, url: str) -> None:
        # Dirty now, as a stock client marks itself when it registers again after a 404.
        dirty = str(time.time_ns() // 1_000_000)
        doc = instance_doc(APP, iid, leaseInfo=self.lease, lastDirtyTimestamp=dirty)
        try:
            async with self.session.post(f"{url}apps/{APP}", json={"instance": doc}) as response:
                await response.read()
                if response.status != 204:
                    self.failures.append(f"register {iid} at {url}: {response.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.failures.append(f"register {iid} at {url}: {exc!r}")

    async def heartbeat(self, iid: str, url: str) -> None:
        try:
            async with self.session.put(f"{url}apps/{APP}/{iid}") as response:
                await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.failures.append(f"heartbeat {iid} to {url}: {exc!r}")
            return
        if status == 200:
            self.renewed_at[iid] = time.monotonic()
        elif status == 404:
            await self.register(iid, url)
            self.registered_again_at[iid] = self.renewed_at[iid] = time.monotonic()
        else:
            self.failures.append(f"heartbeat {iid} to {url}: {status}")

    async def renew(
        self, ids: Sequence[str], *, interval: float, first_at: float, until: float
    ) -> None:
        """Heartbeats for `ids` but the silent ones, each round's at once, at `first_at` and
        every `interval` after (monotonic times) up to `until`."""
        for round_ in itertools.count():
            at = first_at + round_ * interval
            if at >= until:
                return
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            await asyncio.gather(
                *(
                    self.heartbeat(iid, self.urls[(k + round_) % len(self.urls)])
                    for k, iid in enumerate(ids)
                    if iid not in self.silent
                )
            )


async def _look(
    session: aiohttp.ClientSession, url: str
) -> tuple[float, frozenset[str], dict[str, Any]]:
    """A node's evictions so far, the instances it lists, and its `selfPreservation` status."""
    async with session.get(url.removesuffix("/eureka/") + "/metrics") as response:
        metrics = await response.read()
    found = re.search(rb"^registry_evictions_total (\S+)$", metrics, re.M)
    assert found is not None, metrics
    async with session.get(url + "apps", headers=JSON) as response:
        assert 200 == response.status
        apps = orjson.loads(await response.read())["applications"]["application"]
    listed = frozenset(i["instanceId"] for app in apps for i in app["instance"])
    async with session.get(url + "status", headers=JSON) as response:
        assert 200 == response.status
        held = orjson.loads(await response.read())["selfPreservation"]
    return float(found[1]), listed, held


@dataclass(frozen=True)
class Shape:
    lease: dict[str, int]
    window: float  # renewal_window
    after: float  # seconds of silence watched after the silent leases ran out
    back: float  # seconds watched once the silent half heartbeat again


EUREKA_TENTH = Shape(
    {"renewalIntervalInSecs": 3, "durationInSecs": 9}, window=6, after=6 * 6 + 1, back=2 * 6 + 1
)
SHORT_LEASES = Shape(
    {"renewalIntervalInSecs": 1, "durationInSecs": 5}, window=60, after=65, back=10
)


class TestCluster:
    @pytest.mark.parametrize(
        "shape", [EUREKA_TENTH, SHORT_LEASES], ids=["eureka-tenth", "short-leases"]
    )
    async def test_half_the_heartbeats_stopping_evicts_at_most_the_cap_on_any_node(
        self, nodes, shape
    ):
        """Every node evicts at most the cap of the silent half and lists the rest until they
        heartbeat again, then evicts nothing more and lists everyone."""
        cluster = await nodes.cluster(
            3,
            limits__fetch_rate_limit=0,
            self_preservation__renewal_window=shape.window,
            leases__eviction_interval=SWEEP,
            self_preservation__renewal_threshold_update_interval=RECOUNT,
        )
        urls = [node.url for node in cluster]
        ids = [f"i-{n}" for n in range(60)]
        everyone, silent = frozenset(ids), frozenset(ids[1::2])
        cap, interval = _cap(len(ids)), shape.lease["renewalIntervalInSecs"]
        duration = shape.lease["durationInSecs"]
        async with aiohttp.ClientSession(timeout=QUICK) as session:

            async def looks() -> list[tuple[float, frozenset[str], dict[str, Any]]]:
                return list(await asyncio.gather(*(_look(session, url) for url in urls)))

            clients = _Clients(session, urls, shape.lease)
            await asyncio.gather(*(clients.register(iid, urls[k % 3]) for k, iid in enumerate(ids)))
            await eventually(
                looks,
                lambda seen: all(everyone == listed for _, listed, _ in seen),
                what="every node listing every instance",
            )
            started = time.monotonic()
            # Bounded by the longest the test can take: every phase at its longest, and more.
            until = started + 3 * shape.window + duration + shape.after + shape.back + 30
            renewing = asyncio.ensure_future(
                clients.renew(ids, interval=interval, first_at=started, until=until)
            )
            try:
                await asyncio.sleep(shape.window - 1)
                await eventually(
                    looks,
                    lambda seen: all(held["evicting"] for _, _, held in seen),
                    timeout=shape.window + 12,
                    what="every node evicting before the silence",
                )

                clients.silent |= silent  # half of them fall silent at once
                silenced = time.monotonic()
                most_evicted, fewest_listed = [0.0] * 3, [len(silent)] * 3
                missing: list[set[str]] = [set(), set(), set()]
                why: list[dict[str, Any] | None] = [None] * 3  # at the first look over the cap
                last: list[dict[str, Any]] = [{}] * 3
                while True:
                    last_renewal = max(silenced, *(clients.renewed_at.get(i, 0) for i in silent))
                    if time.monotonic() > last_renewal + duration + shape.after:
                        break
                    for k, (evicted, listed, held) in enumerate(await looks()):
                        most_evicted[k] = max(most_evicted[k], evicted)
                        fewest_listed[k] = min(fewest_listed[k], len(silent & listed))
                        missing[k] |= everyone - silent - listed - set(clients.registered_again_at)
                        over = evicted > cap or len(silent & listed) < len(silent) - cap
                        if why[k] is None and (over or missing[k]):
                            why[k] = held
                        last[k] = held
                    await asyncio.sleep(1)
                over = [
                    f"node {k}: {most_evicted[k]:g} evicted (cap {cap}), at the fewest "
                    f"{fewest_listed[k]} of the {len(silent)} silent listed (at least "
                    f"{len(silent) - cap}), heartbeating but not listed: {sorted(missing[k])}; "
                    f"when first seen: {why[k]}; at the end: {last[k]}"
                    for k in range(3)
                    if why[k] is not None
                ]
                assert [] == over, "\n".join(over)

                before = [evicted for evicted, _, _ in await looks()]
                clients.silent.clear()  # the silent half heartbeat again
                back = time.monotonic()
                while time.monotonic() < back + shape.back:
                    seen = await looks()
                    assert before == [evicted for evicted, _, _ in seen], (
                        f"{[h for _, _, h in seen]}"
                    )
                    await asyncio.sleep(1)
                assert not renewing.done(), renewing
            finally:
                renewing.cancel()
            seen = await looks()
            # An instance registered again after a 404 in the last seconds may still be on its
            # way to the other nodes.
            in_flight = {
                i for i, t in clients.registered_again_at.items() if t > time.monotonic() - 2
            }
            assert [everyone] * 3 == [listed | in_flight for _, listed, _ in seen], (
                f"{[(sorted(everyone - listed - in_flight), held) for _, listed, held in seen]}"
            )
            assert before == [evicted for evicted, _, _ in seen], f"{[held for _, _, held in seen]}"
        assert [] == clients.failures


# One node; its windows are counted from its start, which is t = 0 here (it answers some 20 ms
# after its window loop starts).
WINDOW = 6  # renewal_window
LEASE = {"renewalIntervalInSecs": 1, "durationInSecs": 5}
HONEST = [f"honest-{n}" for n in range(12)]
GAMING = [f"gaming-{n}" for n in range(3)]
DEAD = "dead-0"
RENEW_FROM = 0.5  # the honest and the dead one: half a second clear of each window's end
GAMING_FROM, GAMING_EVERY = 1.0, 2.9
DEAD_UNTIL = 13.6  # its last renewal at t = 13.5: one full window and 1.5 s more


class TestClaimedRenewals:
    async def test_leases_renewing_less_often_than_they_claim_cannot_hold_eviction(self, servers):
        """A dead instance among leases that renew a third as often as they claim is evicted
        within four windows of its lease running out, and nothing else is."""
        server = await servers.start(
            store__enabled="false",
            limits__fetch_rate_limit=0,
            self_preservation__renewal_window=WINDOW,
            leases__eviction_interval=SWEEP,
            self_preservation__renewal_threshold_update_interval=RECOUNT,
        )
        t0 = time.monotonic()
        live = frozenset(HONEST + GAMING)
        async with aiohttp.ClientSession(timeout=QUICK) as session:
            clients = _Clients(session, [server.eureka], LEASE)
            await asyncio.gather(*(clients.register(iid, server.eureka) for iid in [*live, DEAD]))
            until = t0 + DEAD_UNTIL + LEASE["durationInSecs"] + 4 * WINDOW + 5
            renewing = [
                asyncio.ensure_future(
                    clients.renew(HONEST, interval=1, first_at=t0 + RENEW_FROM, until=until)
                ),
                asyncio.ensure_future(
                    clients.renew(
                        GAMING, interval=GAMING_EVERY, first_at=t0 + GAMING_FROM, until=until
                    )
                ),
                asyncio.ensure_future(
                    clients.renew(
                        [DEAD], interval=1, first_at=t0 + RENEW_FROM, until=t0 + DEAD_UNTIL
                    )
                ),
            ]
            try:
                await renewing[2]
                deadline = clients.renewed_at[DEAD] + LEASE["durationInSecs"] + 4 * WINDOW
                while time.monotonic() < deadline:
                    _, listed, _ = await _look(session, server.eureka)
                    if DEAD not in listed:
                        break
                    await asyncio.sleep(0.5)
                await asyncio.sleep(2 * SWEEP)  # and a few sweeps more: nothing else goes
                evicted, listed, held = await _look(session, server.eureka)
                assert not any(task.done() for task in renewing[:2]), renewing
            finally:
                for task in renewing:
                    task.cancel()
        assert (live, 1.0, True) == (listed, evicted, held["evicting"]), f"{held}"
        assert ([], {}) == (clients.failures, clients.registered_again_at)
