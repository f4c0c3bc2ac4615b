"""A model of a three-node cluster, driven by hypothesis: the registries are the real ones,
and so are what travels between them (batch items encoded by peers.items and applied by the
batch handler's `answer`, answers handled by the real Dispatcher, anti-entropy's `reconcile`
and merges); only the network between them is the model's, so that it can lose batches,
reorder them, cut a node off and heal it, and the store is the registry as of its last flush
(a client's cancel flushed before its answer, everything else written behind), restored by
the real `restore` when a node restarts.

Clients behave as Eureka's: register with a new lastDirtyTimestamp, heartbeat their node,
register again (marked dirty anew) when a heartbeat is answered 404, fail over to another
node when theirs cannot be reached, cancel, or die without a word. Admins set and remove
overrides on any reachable node.

Checked after every step: no node that has let a cancelled instance go holds it again before
its client registers again (no resurrection by a batch, a 409 or anti-entropy). Checked at
the end, after the heal, the clients' heartbeats for two leases and one anti-entropy round:
every node lists exactly the live clients' instances, with the same statuses, and the same
overrides: the last admin decision on each.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from peers.anti_entropy import reconcile
from peers.digest import Digests
from peers.dispatcher import Dispatcher
from peers.pending import Task
from registry import FakeClock
from registry.codec import json_codec
from registry.codec.notes import notes_document, removals_document
from registry.core.model import InstanceStatus, ReplicationAction
from registry.core.overrides import Note
from registry.core.registry import Registry
from registry.core.subscriber import Subscriber
from registry.errors import UnknownInstance
from registry.http.peer_api import answer, removal_item
from registry.reads.journal import DeltaJournal
from registry.settings import Settings
from registry.store.restore import restore
from registry.store.sqlite import Snapshot, StoredOverride
from tests.factories import make

NODES = ("A", "B", "C")
IDS = ("i-1", "i-2", "i-3", "i-4")
APP = "ORDERS"
LEASE_MS = 90_000
SKEW_MS = 300_000
S = InstanceStatus


class Wire:
    """The model's network to one node: the calls a PeerClient makes, answered by the node's
    real handlers' functions, in process."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.url = f"model://{node.name}/"
        self.stock = False  # every node of the model is ours

    async def send_batch(self, items: list[bytes]) -> list[Any]:
        now_ms = self.node.clock.wall_ms()
        return [answer(self.node.registry, orjson.loads(i), now_ms, SKEW_MS) for i in items]

    async def fetch_digest(self) -> dict[str, Any]:
        registry = self.node.registry
        return {
            "applications": dict(await self.node.digests.current()),
            "overrideNotes": notes_document(registry.overrides.notes, registry.overrides),
            "overridesRemoved": removals_document(registry.overrides.notes),
        }

    async def fetch_application(self, app: str) -> dict[str, Any] | None:
        leases = list(self.node.registry.application(app))
        if not leases:
            return None
        docs = [json_codec.instance_dict(lease) for lease in leases]
        return {"application": {"name": app, "instance": docs}}

    async def fetch_removed(self, app: str | None = None) -> dict[str, Any]:
        tombstones = self.node.registry.tombstones
        chosen = tombstones if app is None else tombstones.of(app)
        return {"removed": [removal_item(t) for t in chosen]}


class Node(Subscriber):
    def __init__(self, name: str, clock: FakeClock) -> None:
        self.name, self.clock = name, clock
        self.stored: Snapshot | None = None
        self.dispatchers: dict[str, Dispatcher] = {}
        self.start()

    def start(self) -> None:
        self.registry = Registry(removal_margin_ms=10_000, tombstone_retention_ms=3_600_000)
        self.digests = Digests(self.registry)
        self.registry.subscribe(self.digests)
        self.registry.subscribe(self)
        self.dispatchers = {}
        if self.stored is not None:
            restore(self.registry, DeltaJournal(retention_ms=1), self.stored, now_ms=self.now)

    def connect(self, peers: list[Node]) -> None:
        self.dispatchers = {
            p.name: Dispatcher(Wire(p), self.registry, self.clock, Settings(), rng=random.Random(0))
            for p in peers
        }

    def on_replicate(
        self,
        action: ReplicationAction,
        app: str,
        instance_id: str,
        status: InstanceStatus | None = None,
        last_dirty_ms: int | None = None,
        at_ms: int | None = None,
    ) -> None:
        task = Task(action, app, instance_id, self.clock.monotonic(), status, last_dirty_ms, at_ms)
        for dispatcher in self.dispatchers.values():
            dispatcher.enqueue(task)

    def flush(self) -> None:
        """The store as the writer leaves it: the registry as of now."""
        registry = self.registry
        leases = list(registry.leases())
        overrides = []
        for iid, status in registry.overrides.items():
            note = registry.overrides.notes.of(iid, status) or Note(
                APP, status, None, self.now, None
            )
            overrides.append(
                StoredOverride(APP, iid, status, note.reason, note.set_ms, None, note.by)
            )
        self.stored = Snapshot(
            instances=[lease.instance for lease in leases],
            overrides=overrides,
            index=registry.index,
            epoch=None,
            renewals=[lease.last_renewal_ms for lease in leases],
            renewing=[lease.renewed for lease in leases],
            tombstones=list(registry.tombstones),
            override_removals=list(registry.overrides.notes.removals()),
        )

    @property
    def now(self) -> int:
        return self.clock.wall_ms()

    def held(self) -> dict[str, tuple[InstanceStatus, InstanceStatus]]:
        return {
            lease.instance.instance_id: (lease.instance.status, lease.instance.overridden_status)
            for lease in self.registry.leases()
            if not lease.is_expired(self.now)
        }


@dataclass
class Client:
    iid: str
    home: str
    dirty_ms: int = 0
    alive: bool = False
    cancelled_ms: int | None = None  # its last word was a cancel, then


@dataclass
class Decision:
    status: InstanceStatus | None  # None: removed
    at_ms: int


class Cluster(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.nodes = {name: Node(name, self.clock) for name in NODES}
        for node in self.nodes.values():
            node.connect([p for p in self.nodes.values() if p is not node])
        self.clients: dict[str, Client] = {}
        self.decisions: dict[str, Decision] = {}
        self.cut: str | None = None
        self.gone_seen: set[tuple[str, str]] = set()  # (node, id): let go after a cancel

    def teardown(self) -> None:
        try:
            self.check_agreement()
        finally:
            self.loop.close()

    # The world -----------------------------------------------------------------------------

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def reachable(self, name: str) -> bool:
        return name != self.cut

    def node_for(self, client: Client) -> Node:
        """The client's node, or the next one it fails over to."""
        order = NODES[NODES.index(client.home) :] + NODES[: NODES.index(client.home)]
        return self.nodes[next(name for name in order if self.reachable(name))]

    def register(self, client: Client) -> None:
        self.clock_tick()
        client.dirty_ms = self.clock.wall_ms()
        client.alive, client.cancelled_ms = True, None
        node = self.node_for(client)
        node.registry.register(make(client.iid, APP, dirty=client.dirty_ms), now_ms=node.now)
        self.gone_seen = {(n, i) for n, i in self.gone_seen if i != client.iid}

    def clock_tick(self) -> None:
        self.run(self.clock.advance(0.001))

    def deliver(self, source: str, target: str, *, reorder: bool = False) -> None:
        if not (self.reachable(source) and self.reachable(target)):
            return
        dispatcher = self.nodes[source].dispatchers[target]
        while len(dispatcher.pending):
            tasks = dispatcher.pending.take(250)
            if reorder:
                random.Random(len(tasks)).shuffle(tasks)
            self.run(dispatcher._send(tasks))

    def deliver_all(self) -> None:
        for _ in range(3):  # answers queue more (a 404's registration)
            for source in NODES:
                for target in NODES:
                    if source != target:
                        self.deliver(source, target)

    def anti_entropy(self, name: str) -> None:
        node = self.nodes[name]
        for peer in NODES:
            if peer != name and self.reachable(peer) and self.reachable(name):
                self.run(reconcile(Wire(self.nodes[peer]), node.registry, node.digests, self.clock))

    # Clients -----------------------------------------------------------------------------

    @rule(iid=st.sampled_from(IDS), home=st.sampled_from(NODES))
    def client_registers(self, iid: str, home: str) -> None:
        client = self.clients.setdefault(iid, Client(iid, home))
        client.home = home
        self.register(client)

    @rule(iid=st.sampled_from(IDS))
    def client_heartbeats(self, iid: str) -> None:
        client = self.clients.get(iid)
        if client is None or not client.alive:
            return
        node = self.node_for(client)
        try:
            node.registry.renew(APP, iid, node.now, False, client.dirty_ms)
        except UnknownInstance:
            self.register(client)  # a 404: registers again, marked dirty anew

    @rule(iid=st.sampled_from(IDS))
    def client_cancels(self, iid: str) -> None:
        client = self.clients.get(iid)
        if client is None or not client.alive:
            return
        client.alive = False
        node = self.node_for(client)
        client.cancelled_ms = node.now
        with contextlib.suppress(UnknownInstance):
            node.registry.cancel(APP, iid, now_ms=node.now)
        node.flush()  # on disk before the 200

    @rule(iid=st.sampled_from(IDS))
    def client_dies(self, iid: str) -> None:
        if iid in self.clients:
            self.clients[iid].alive = False

    # Admins --------------------------------------------------------------------------------

    @rule(
        iid=st.sampled_from(IDS),
        name=st.sampled_from(NODES),
        status=st.sampled_from([S.OUT_OF_SERVICE, S.DOWN, None]),
    )
    def admin_decides(self, iid: str, name: str, status: InstanceStatus | None) -> None:
        if not self.reachable(name):
            return
        self.clock_tick()
        node = self.nodes[name]
        try:
            if status is None:
                node.registry.delete_status_override(APP, iid, now_ms=node.now)
            else:
                note = Note(APP, status, "model", node.now, None, "ops")
                node.registry.set_status_override(APP, iid, status, now_ms=node.now, note=note)
        except UnknownInstance:
            return
        node.flush()  # on disk before the answer
        self.decisions[iid] = Decision(status, node.now)

    # Nodes and the network -----------------------------------------------------------------

    @rule(seconds=st.integers(1, 40))
    def time_passes(self, seconds: int) -> None:
        self.run(self.clock.advance(seconds))

    @rule(name=st.sampled_from(NODES))
    def node_evicts(self, name: str) -> None:
        node = self.nodes[name]
        for lease in list(node.registry.leases()):
            node.registry.evict(APP, lease.instance.instance_id, now_ms=node.now)

    @rule(name=st.sampled_from(NODES))
    def store_flushes(self, name: str) -> None:
        self.nodes[name].flush()

    @rule(name=st.sampled_from(NODES))
    def node_restarts(self, name: str) -> None:
        """Killed and started from its store: what it had not flushed or sent is lost; once
        started it runs anti-entropy with the peers it reaches."""
        node = self.nodes[name]
        node.start()
        node.connect([p for p in self.nodes.values() if p is not node])
        self.gone_seen = {(n, i) for n, i in self.gone_seen if n != name}
        self.anti_entropy(name)

    @rule(source=st.sampled_from(NODES), to=st.sampled_from(NODES), reorder=st.booleans())
    def batches_arrive(self, source: str, to: str, reorder: bool) -> None:
        if source != to:
            self.deliver(source, to, reorder=reorder)

    @rule(source=st.sampled_from(NODES), to=st.sampled_from(NODES))
    def batches_are_lost(self, source: str, to: str) -> None:
        if source != to:
            dispatcher = self.nodes[source].dispatchers[to]
            dispatcher.pending.take(len(dispatcher.pending))

    @precondition(lambda self: self.cut is None)
    @rule(name=st.sampled_from(NODES))
    def partition(self, name: str) -> None:
        self.cut = name

    @rule()
    def heal(self) -> None:
        self.cut = None

    @rule(name=st.sampled_from(NODES))
    def anti_entropy_runs(self, name: str) -> None:
        self.anti_entropy(name)

    # What must hold --------------------------------------------------------------------------

    @invariant()
    def no_cancelled_instance_comes_back(self) -> None:
        for iid, client in self.clients.items():
            if client.cancelled_ms is None:
                continue
            for name, node in self.nodes.items():
                held = iid in node.held()
                assert not (held and (name, iid) in self.gone_seen), (
                    f"{iid}, let go by {name} after its cancel, is back there"
                )
                removal = node.registry.tombstones.get(APP, iid)
                if (
                    not held
                    and removal is not None
                    and (removal.dirty_ms, removal.at_ms) >= (client.dirty_ms, client.cancelled_ms)
                ):
                    self.gone_seen.add((name, iid))

    def check_agreement(self) -> None:
        """The heal, two leases of heartbeats, one anti-entropy round: all agree."""
        self.cut = None
        for _ in range(6):
            self.run(self.clock.advance(30))
            for iid in list(self.clients):
                self.client_heartbeats(iid)
            self.deliver_all()
            for name in NODES:
                self.node_evicts(name)
        for name in NODES:
            self.anti_entropy(name)
        live = {iid for iid, client in self.clients.items() if client.alive}
        expected = {iid: d.status for iid, d in self.decisions.items() if d.status is not None}
        for name, node in self.nodes.items():
            held = set(node.held())
            assert live == held, f"{name} holds {sorted(held)}, the live are {sorted(live)}"
            overrides = dict(node.registry.overrides)
            assert expected == overrides, f"{name}: {overrides}, the admins said {expected}"
        # An override removed leaves its instance UNKNOWN until its next heartbeat makes it
        # register again (contract 6.6): one more round, and every status agrees too.
        self.run(self.clock.advance(30))
        for iid in list(self.clients):
            self.client_heartbeats(iid)
        self.deliver_all()
        views = {name: node.held() for name, node in self.nodes.items()}
        assert views["A"] == views["B"] == views["C"], views


TestConvergence = Cluster.TestCase
TestConvergence.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
