"""One peer's dispatcher: sends it, in batches, every change it is owed (contract 11.3, 11.4).

Queueing is a synchronous dictionary operation, so a slow or dead peer never slows a client
request. A batch leaves when its oldest change has waited `peers.change_delay`, its
oldest heartbeat `peers.batch_delay` (time for newer heartbeats to replace it), or when
a full batch is waiting. One batch is in flight at a time, so the peer applies changes in the
order they happened here.

A network error, a timeout or a 503 puts the batch back and pauses with exponential backoff and
jitter: up to `peers.max_backoff` for a busy peer (a read timeout, a 503), up to
`peers.probe_interval` for one that cannot be reached, so that its return is noticed in seconds
(and `on_return` called: the cluster runs anti-entropy with it at once), or at once when a peer
calls this node (a restarted node calls its peers as it starts). Any other refusal drops
the batch (counted). Per-item
answers drive conflict handling: a heartbeat the peer does not know is followed by the full
registration, and a 409 carries the peer's newer copy, which we adopt.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from peers import items, merge
from peers.pending import PendingTasks, Task
from peers.transport import PeerClient, PeerRefused, PeerUnavailable
from registry.codec import instance_from_wire, wire
from registry.common.clock import Clock
from registry.common.tasks import wait_set
from registry.core.model import ReplicationAction
from registry.core.registry import Registry
from registry.core.tombstones import Tombstone
from registry.errors import BadInput
from registry.settings import Settings

log = structlog.get_logger()

_A = ReplicationAction
_NETWORK_PAUSE = 0.1  # first retry after a refused connection (Eureka: 100 ms)
_CONGESTION_PAUSE = 1.0  # first retry after a timeout or 503 (Eureka: 1000 ms)


@dataclass(slots=True)
class PeerStats:
    reachable: bool | None = None  # None until the first call ends
    last_success_ms: int = 0
    last_error: str = ""
    sent: int = 0  # items the peer answered
    retried: int = 0  # items put back after a failed batch
    failed: int = 0  # items the peer refused (the batch, or the item alone)
    reregistered: int = 0  # heartbeats answered 404, followed by the registration
    adopted: int = 0  # heartbeats answered 409, whose newer copy we took
    batches: int = 0
    last_batch_ms: float = 0.0  # round trip of the last batch


class Dispatcher:
    def __init__(
        self,
        peer: PeerClient,
        registry: Registry,
        clock: Clock,
        settings: Settings,
        *,
        rng: random.Random | None = None,
        on_return: Callable[[], None] | None = None,
    ) -> None:
        self.peer = peer
        self._on_return = on_return
        self.pending = PendingTasks(limit=settings.peers.max_pending)
        self.stats = PeerStats()
        self._registry = registry
        self._clock = clock
        self._batch_size = settings.peers.batch_size
        self._heartbeat_delay = settings.peers.batch_delay
        self._change_delay = settings.peers.change_delay
        self._max_backoff = settings.peers.max_backoff
        self._probe_interval = settings.peers.probe_interval
        self._rng = rng or random.Random()
        self._wake = asyncio.Event()
        self._peer_spoke = asyncio.Event()  # a peer called: see heard_from_a_peer
        self._emptied = asyncio.Event()  # set when a send leaves nothing pending (for drain)
        self._failures = 0
        self._draining = False
        self._sending = False

    def enqueue(self, task: Task) -> None:
        """Queue one task for this peer (synchronous, constant time)."""
        pending = self.pending
        was_empty = not len(pending)
        pending.add(task)
        # Heartbeats only wake the sender when they start a batch or fill one; anything
        # else may make a batch due sooner.
        if was_empty or task.action is not _A.HEARTBEAT or len(pending) >= self._batch_size:
            self._wake.set()

    @property
    def idle(self) -> bool:
        """Nothing pending and no batch in flight."""
        return not self._sending and not len(self.pending)

    def lag(self) -> float:
        """Seconds the oldest pending task has waited: how far behind this peer is."""
        oldest = self.pending.oldest_queued_at()
        return 0.0 if oldest is None else max(0.0, self._clock.monotonic() - oldest)

    async def run(self) -> None:
        """Send batches until cancelled."""
        while True:
            await self._until_batch_due()
            tasks = self.pending.take(self._batch_size)
            self._sending = True
            try:
                await self._send(tasks)
            except Exception:
                log.exception("replication_failed", peer=self.peer.url)
            finally:
                self._sending = False
            if not len(self.pending):
                self._emptied.set()

    async def drain(self, timeout: float) -> None:
        """Send what is pending without waiting for batch delays, for up to `timeout` seconds.

        Skipped when the peer is not reachable: there is no point waiting out its backoff.
        """
        if not len(self.pending) or self.stats.reachable is False:
            return
        self._draining = True
        self._emptied.clear()
        self._wake.set()
        try:
            await asyncio.wait_for(self._emptied.wait(), timeout)
        except TimeoutError:
            log.warning("replication_drain_incomplete", peer=self.peer.url, left=len(self.pending))

    async def _until_batch_due(self) -> None:
        while True:
            self._wake.clear()
            if len(self.pending) >= self._batch_size or (self._draining and len(self.pending)):
                return
            due = self.pending.due_at(
                heartbeat_delay=self._heartbeat_delay, change_delay=self._change_delay
            )
            if due is None:
                await self._wake.wait()
                continue
            delay = due - self._clock.monotonic()
            if delay <= 0:
                return
            await wait_set(self._clock, self._wake, delay)

    async def _send(self, tasks: list[Task]) -> None:
        now_ms = self._clock.wall_ms()
        batch: list[tuple[Task, bytes]] = []
        stock = self.peer.stock is True
        for task in tasks:
            item = items.encoded(task, self._registry, now_ms=now_ms, stock=stock)
            if item is not None:
                batch.append((task, item))
        if not batch:
            return
        started = self._clock.monotonic()
        try:
            answers = await self.peer.send_batch([item for _, item in batch])
        except PeerUnavailable as exc:
            self.pending.put_back(task for task, _ in batch)
            self.stats.retried += len(batch)
            self._unreachable(str(exc))
            await self._pause(self._backoff(congested=exc.congested), congested=exc.congested)
            return
        except PeerRefused as exc:
            if self.peer.stock and not stock:
                # A stock Eureka server refuses a batch with fields of ours in it: it goes again
                # in Eureka's form alone.
                log.info("peer_is_stock_eureka", peer=self.peer.url)
                self.pending.put_back(task for task, _ in batch)
                return
            # It answers, so no reason to hold back the next batch; this one is lost.
            log.warning("replication_batch_refused", peer=self.peer.url, detail=str(exc))
            self.stats.failed += len(batch)
            self.stats.reachable = True
            self.stats.last_error = str(exc)
            self._failures = 0
            return
        stats = self.stats
        stats.batches += 1
        stats.sent += len(batch)
        stats.last_batch_ms = (self._clock.monotonic() - started) * 1000
        stats.last_success_ms = self._clock.wall_ms()
        if stats.reachable is False:
            log.info("peer_reachable", peer=self.peer.url)
            if self._on_return is not None:
                self._on_return()
        stats.reachable = True
        self._failures = 0
        self._handle_answers(batch, answers)

    def _handle_answers(self, batch: list[tuple[Task, bytes]], answers: list[Any]) -> None:
        if len(answers) != len(batch):
            log.warning(
                "replication_answer_mismatch", peer=self.peer.url, sent=len(batch), got=len(answers)
            )
            return
        refused: Counter[str] = Counter()
        for (task, _), answer in zip(batch, answers, strict=True):
            code = answer.get("statusCode") if isinstance(answer, dict) else None
            if isinstance(code, int) and 200 <= code < 300:
                continue
            if task.action is _A.HEARTBEAT and code == 404:
                self.stats.reregistered += 1
                self.enqueue(Task(_A.REGISTER, task.app, task.instance_id, self._clock.monotonic()))
            elif (
                code == 409
                and task.action in (_A.HEARTBEAT, _A.CANCEL)
                and "responseEntity" in answer
            ):
                self._adopt(task, answer.get("responseEntity"))
            elif (
                code == 409 and task.action is _A.REGISTER and answer.get("error") == "removed_here"
            ):
                self._bury(task, answer)
            elif not (task.action is _A.CANCEL and code == 404):  # already gone there: fine
                self.stats.failed += 1
                refused[f"{task.action.value} {code}"] += 1
        if refused:
            log.warning("replication_items_refused", peer=self.peer.url, **refused)

    def _adopt(self, task: Task, entity: Any) -> None:
        """The peer holds newer data for an instance we heartbeat or cancel: take its copy,
        renewed when it was there."""
        now_ms = self._clock.wall_ms()
        try:
            instance = instance_from_wire(entity, now_ms=now_ms, expected_app=task.app)
            renewed = merge.renewed_at(entity, now_ms=now_ms)
        except BadInput as exc:
            self.stats.failed += 1
            log.warning("replication_conflict_unreadable", peer=self.peer.url, detail=str(exc))
            return
        if self._registry.adopt(instance, now_ms=now_ms, last_renewal_ms=renewed):
            self.stats.adopted += 1
            log.info(
                "replication_conflict_adopted",
                peer=self.peer.url,
                app=task.app,
                instance_id=task.instance_id,
            )

    def _bury(self, task: Task, answer: dict[str, Any]) -> None:
        """The peer removed the instance after the copy we sent: remove ours too, unless it
        has won over that removal since (registry/core/tombstones.py)."""
        try:
            dirty_ms = wire.timestamp(answer.get("lastDirtyTimestamp"), "lastDirtyTimestamp")
            at_ms = wire.timestamp(answer.get("removedAt"), "removedAt")
        except BadInput:
            dirty_ms = at_ms = None
        if dirty_ms is None or at_ms is None:
            self.stats.failed += 1
            return
        expired = answer.get("expired") is not False  # as peers/merge.py reads it
        removal = Tombstone(task.app, task.instance_id, dirty_ms, at_ms, expired)
        if self._registry.bury(removal, now_ms=self._clock.wall_ms()):
            log.info(
                "replication_removal_taken",
                peer=self.peer.url,
                app=task.app,
                instance_id=task.instance_id,
            )

    def heard_from_a_peer(self) -> None:
        """A peer called this node: this one, if it could not be reached, may be back (a node
        that restarts calls its peers at once), so its next try need not wait out the pause."""
        self._peer_spoke.set()

    async def _pause(self, pause: float, *, congested: bool) -> None:
        """Wait `pause` before the next try; an unreachable peer's (not a busy one's) ends
        when a peer calls, but not before _NETWORK_PAUSE, however often peers call."""
        self._peer_spoke.clear()
        if congested or pause <= _NETWORK_PAUSE:
            await self._clock.sleep(pause)
            return
        await self._clock.sleep(_NETWORK_PAUSE)
        await wait_set(self._clock, self._peer_spoke, pause - _NETWORK_PAUSE)

    def _unreachable(self, detail: str) -> None:
        if self.stats.reachable is not False:
            log.warning("peer_unreachable", peer=self.peer.url, detail=detail)
        self.stats.reachable = False
        self.stats.last_error = detail

    def _backoff(self, *, congested: bool) -> float:
        """Exponential from the first pause, capped, with half of it random (equal jitter)."""
        self._failures += 1
        first, cap = (
            (_CONGESTION_PAUSE, self._max_backoff)
            if congested
            else (_NETWORK_PAUSE, min(self._max_backoff, self._probe_interval))
        )
        pause: float = min(cap, first * 2.0 ** (self._failures - 1))
        return pause / 2 + self._rng.uniform(0, pause / 2)
