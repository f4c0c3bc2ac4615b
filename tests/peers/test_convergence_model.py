"""A model of a three-node cluster, driven by hypothesis: the registries are the real ones,
and so are what travels between them (batch items encoded by peers.items and applied by the
batch handler's `answer`, answers handled by the real Dispatcher, anti-entropy's `reconcile`
and merges); only the network between them is the model's, so that it can lose batches,
reorder them, cut a node off (from everyone, or from its peers alone) and heal it, and the
store is the registry as of its last flush (a client's cancel flushed before its answer,
everything else written behind), restored by the real `restore` when a node restarts.

Each node has a clock of its own, set apart from the others by an offset drawn once per
example (time then moves on every clock at once): decisions are dated by the node that made
them, so one node may date a decision ahead of a later one made on another, or at the same
millisecond.

Clients behave as Eureka's: register with a new lastDirtyTimestamp, heartbeat their node,
register again (marked dirty anew) when a heartbeat is answered 404, fail over to another
node when theirs cannot be reached, cancel, or die without a word. Admins set and remove
overrides on any reachable node. A node cut off from its peers alone still serves its clients
and admins: both sides of the cut take registrations, cancels and conflicting overrides.

Checked after every step: no node that has let a cancelled instance go holds it again before
its client registers again (no resurrection by a batch, a 409 or anti-entropy). Checked at
the end, right after the heal, what was queued and one anti-entropy round: no node holds an
instance whose client's cancel removed its latest copy. Then, after the clients' heartbeats
for two leases and one anti-entropy round:
every node lists exactly the live clients' instances, with the same statuses, and the same
overrides: the latest admin decision on each, as the product orders them (`Decision.order`).
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
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

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
MARGIN_MS = 10_000
# Each node's clock is off by up to this, either way: two nodes then differ by up to
# MARGIN_MS, the `removal_margin` that the rule of registry/core/tombstones.py needs clocks to
# stay within for no removal to be undone (docs/differences.md, "Removals and copies"; the
# settings table of docs/operations.md). Beyond it, up to `max_clock_skew`, a copy renewed
# within the skew after a removal "may go either way" by design; at exactly the margin the
# rule's strict comparison still keeps the removal.
OFFSET_MS = MARGIN_MS // 2
# Clocks kept by NTP differ by milliseconds: drawn as often as the far ones, so that nodes date
# decisions at the same millisecond too.
OFFSETS = st.one_of(st.integers(-3, 3), st.integers(-OFFSET_MS, OFFSET_MS))
S = InstanceStatus
DECISIONS = [S.OUT_OF_SERVICE, S.DOWN, None]  # None: the override removed


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
        self.registry = Registry(removal_margin_ms=MARGIN_MS, tombstone_retention_ms=3_600_000)
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
    cancel_took: bool = False  # and it removed the client's latest copy, on that node


@dataclass
class Decision:
    status: InstanceStatus | None  # None: removed
    at_ms: int  # as the node where the admin made it dated it (by its clock)
    node: str

    def order(self) -> tuple[int, int, str]:
        """Which decision is the latest, as the product decides (registry/core/overrides.py):
        the later time by the deciding nodes' own clocks (so one dated ahead by a skewed clock
        wins over one made up to the skew later on a node that had not heard of it; a node
        dates its admin's call after what it had heard), at the same time a set over a
        removal, then the greater status."""
        if self.status is None:
            return (self.at_ms, 0, "")
        return (self.at_ms, 1, self.status.value)


class Cluster(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()  # the clients' (their lastDirtyTimestamps)
        self.nodes: dict[str, Node] = {}
        self.clients: dict[str, Client] = {}
        self.decisions: dict[str, list[Decision]] = {}
        self.cut: str | None = None
        self.peers_only = False  # the cut node still reaches its clients and admins
        self.gone_seen: set[tuple[str, str]] = set()  # (node, id): let go after a cancel

    @initialize(offsets=st.tuples(*[OFFSETS] * len(NODES)))
    def clocks_are_set(self, offsets: tuple[int, ...]) -> None:
        start_ms = self.clock.wall_ms()
        self.nodes = {
            name: Node(name, FakeClock(start_ms + offset))
            for name, offset in zip(NODES, offsets, strict=True)
        }
        for node in self.nodes.values():
            node.connect([p for p in self.nodes.values() if p is not node])

    def teardown(self) -> None:
        try:
            if self.nodes:
                self.check_agreement()
        finally:
            self.loop.close()

    # The world -----------------------------------------------------------------------------

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def reachable(self, name: str) -> bool:
        """Whether clients and admins reach the node."""
        return name != self.cut or self.peers_only

    def linked(self, a: str, b: str) -> bool:
        """Whether two nodes reach each other."""
        return self.cut not in (a, b)

    def node_for(self, client: Client) -> Node:
        """The client's node, or the next one it fails over to."""
        order = NODES[NODES.index(client.home) :] + NODES[: NODES.index(client.home)]
        return self.nodes[next(name for name in order if self.reachable(name))]

    def register(self, client: Client) -> None:
        self.clock_tick()
        client.dirty_ms = self.clock.wall_ms()
        client.alive, client.cancelled_ms, client.cancel_took = True, None, False
        node = self.node_for(client)
        node.registry.register(make(client.iid, APP, dirty=client.dirty_ms), now_ms=node.now)
        self.gone_seen = {(n, i) for n, i in self.gone_seen if i != client.iid}

    def clock_tick(self) -> None:
        self.advance(0.001)

    def advance(self, seconds: float) -> None:
        """Time moves on every clock at once: the offsets stay as drawn."""
        for clock in [self.clock, *(node.clock for node in self.nodes.values())]:
            self.run(clock.advance(seconds))

    def deliver(self, source: str, target: str, *, reorder: bool = False) -> None:
        if not self.linked(source, target):
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
            if peer != name and self.linked(peer, name):
                self.run(reconcile(Wire(self.nodes[peer]), node.registry, node.digests, node.clock))

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

    @rule(iid=st.sampled_from(IDS), after_heartbeat=st.booleans())
    def client_cancels(self, iid: str, after_heartbeat: bool) -> None:
        """The client shuts down; `after_heartbeat`: right after a heartbeat that its node's
        peers received (their renewals, by their clocks, may then be dated after the cancel
        by up to the skew)."""
        client = self.clients.get(iid)
        if client is None or not client.alive:
            return
        if after_heartbeat:  # (a peer without it answers 404: registered, then renewed)
            for _ in range(2):
                self.client_heartbeats(iid)
                self.deliver_all()
        client.alive = False
        node = self.node_for(client)
        client.cancelled_ms = node.now
        with contextlib.suppress(UnknownInstance):
            node.registry.cancel(APP, iid, now_ms=node.now)
        node.flush()  # on disk before the 200
        removal = node.registry.tombstones.get(APP, iid)
        client.cancel_took = removal is not None and removal.dirty_ms == client.dirty_ms

    @rule(iid=st.sampled_from(IDS))
    def client_dies(self, iid: str) -> None:
        if iid in self.clients:
            self.clients[iid].alive = False

    # Admins --------------------------------------------------------------------------------

    @rule(
        pick=st.integers(0, len(IDS) - 1),
        name=st.sampled_from(NODES),
        status=st.sampled_from(DECISIONS),
    )
    def admin_decides(self, pick: int, name: str, status: InstanceStatus | None) -> None:
        """An admin sets or removes an override of an instance the node shows (or of one it
        holds an override of)."""
        iid = self.shown(name, pick)
        if iid is not None:
            self.clock_tick()
            self.decide(name, iid, status)

    @rule(
        pick=st.integers(0, len(IDS) - 1),
        names=st.tuples(st.sampled_from(NODES), st.sampled_from(NODES)),
        statuses=st.tuples(st.sampled_from(DECISIONS), st.sampled_from(DECISIONS)),
    )
    def admins_decide_at_once(
        self,
        pick: int,
        names: tuple[str, str],
        statuses: tuple[InstanceStatus | None, InstanceStatus | None],
    ) -> None:
        """Two admins decide on one instance in the same millisecond, on one node or on two
        (whose clocks may then date both alike)."""
        iid = self.shown(names[0], pick)
        if iid is not None:
            self.clock_tick()
            for name, status in zip(names, statuses, strict=True):
                self.decide(name, iid, status)

    def shown(self, name: str, pick: int) -> str | None:
        """One of the instances an admin reaching the node sees (or of the overrides it
        holds), None when there is none."""
        node = self.nodes[name]
        shown = sorted(set(node.held()) | set(node.registry.overrides))
        return shown[pick % len(shown)] if self.reachable(name) and shown else None

    def decide(self, name: str, iid: str, status: InstanceStatus | None) -> None:
        node = self.nodes[name]
        if not self.reachable(name):
            return
        try:
            if status is None:
                node.registry.delete_status_override(APP, iid, now_ms=node.now)
            else:
                note = Note(APP, status, "model", node.now, None, "ops")
                node.registry.set_status_override(APP, iid, status, now_ms=node.now, note=note)
        except UnknownInstance:
            return
        node.flush()  # on disk before the answer
        # Dated by the node: its clock, or just after its own last word on the override.
        overrides = node.registry.overrides
        note = overrides.note_of(iid)
        at_ms = overrides.notes.removed_at(iid) if note is None else note.set_ms
        assert at_ms is not None and at_ms >= node.now, (iid, at_ms, node.now)
        self.decisions.setdefault(iid, []).append(Decision(status, at_ms, name))

    # Nodes and the network -----------------------------------------------------------------

    @rule(seconds=st.integers(1, 40))
    def time_passes(self, seconds: int) -> None:
        self.advance(seconds)

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

    @rule()
    def batches_all_arrive(self) -> None:
        """What every node queued reaches its peers (and what their answers queue): the
        usual case, so that a client's calls travel on between its other steps."""
        self.deliver_all()

    @rule(source=st.sampled_from(NODES), to=st.sampled_from(NODES))
    def batches_are_lost(self, source: str, to: str) -> None:
        if source != to:
            dispatcher = self.nodes[source].dispatchers[to]
            dispatcher.pending.take(len(dispatcher.pending))

    @precondition(lambda self: self.cut is None)
    @rule(name=st.sampled_from(NODES), peers_only=st.booleans())
    def partition(self, name: str, peers_only: bool) -> None:
        """The node is cut off: from everyone, or from its peers alone (split brain: its
        clients and admins still reach it, and write on both sides)."""
        self.cut, self.peers_only = name, peers_only

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
        """The heal, what was queued, one anti-entropy round: no node holds an instance whose
        client's cancel removed its latest copy on a node (every copy elsewhere was renewed
        before the cancel, by clocks within the margin of the canceller's, so the cancel wins).
        Then two leases of heartbeats and one more round: all agree."""
        self.cut = None
        self.deliver_all()
        for name in NODES:
            self.anti_entropy(name)
        self.deliver_all()
        cancelled = {iid for iid, client in self.clients.items() if client.cancel_took}
        for name, node in self.nodes.items():
            kept = sorted(cancelled & set(node.held()))
            assert not kept, f"{name} still holds {kept}, cancelled, after the heal"
        for _ in range(6):
            self.advance(30)
            for iid in list(self.clients):
                self.client_heartbeats(iid)
            self.deliver_all()
            for name in NODES:
                self.node_evicts(name)
        for name in NODES:
            self.anti_entropy(name)
        live = {iid for iid, client in self.clients.items() if client.alive}
        latest = {iid: max(made, key=Decision.order) for iid, made in self.decisions.items()}
        expected = {iid: d.status for iid, d in latest.items() if d.status is not None}
        for name, node in self.nodes.items():
            held = set(node.held())
            assert live == held, f"{name} holds {sorted(held)}, the live are {sorted(live)}"
            overrides = dict(node.registry.overrides)
            assert expected == overrides, f"{name}: {overrides}, the admins said {expected}"
        # An override removed leaves its instance UNKNOWN until its next heartbeat makes it
        # register again (contract 6.6): one more round, and every status agrees too.
        self.advance(30)
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


def test_a_cancel_on_each_side_of_a_cut_keeps_the_instance_gone() -> None:
    """A case the model found, kept as it was shrunk: A, cut from its peers, takes a client's
    registration and cancel; the client registers on B, renews and cancels there. After the
    heal C refuses A's cancel with the copy B sent it, and A must date that copy by its last
    renewal on C, or it beats B's cancel and B takes the cancelled instance back."""
    cluster = Cluster()
    cluster.clocks_are_set(offsets=(0, 0, 0))
    cluster.partition(name="A", peers_only=True)
    cluster.client_registers(home="A", iid="i-1")
    cluster.client_cancels(after_heartbeat=False, iid="i-1")
    cluster.client_registers(home="B", iid="i-1")
    cluster.client_cancels(after_heartbeat=True, iid="i-1")
    cluster.time_passes(seconds=11)
    cluster.teardown()
