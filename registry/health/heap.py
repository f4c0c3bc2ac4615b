"""Keeping CPython's full garbage collections short with 100 000 instances in memory.

A full collection walks every object the collector tracks. The registry holds a few per
instance (its lease; while a change is in the delta window, its event, snapshot and journal
entry too; the instance itself is a struct the collector does not track, see model.py): at
100 000 instances a full collection took 0.35 s, a stall every client feels. Those objects
live long and form no reference cycles, so collecting them never finds anything.
`gc.freeze()` moves every tracked object into a generation the collector does not walk (in
O(1)); freed by reference counting as usual, they just stop costing collections.

So the registry is frozen once restored, and then every `interval` (a second by default),
each time after a young collection, so that cycles just made are collected rather than frozen.
A full collection then walks only what was made since the last freeze: with 10 s between
freezes, a cold start's encoding (200 000 parts) or a deploy's registrations made full
collections of 20-70 ms; with a second, none over 15 ms in that workload. What a freeze would
keep for good is a reference cycle frozen while in use that becomes garbage later: the
registry's own objects form none, and a request's objects are freed without the collector
(tests/health/test_heap.py freezes in the middle of every kind of request, then finds nothing
to collect). (Not exported as a metric: `gc.get_freeze_count()` walks every frozen object,
40 ms at 100 000 instances.)
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator, Iterator

from registry.common.clock import Clock
from registry.common.tasks import Loops


@contextlib.contextmanager
def collections_paused(*, then_freeze: bool) -> Iterator[None]:
    """No automatic collections within: a warm restart makes a hundred thousand long-lived
    objects at once, which collections would walk again and again for nothing (20 % of a
    restore's time at 100 000 instances). With `then_freeze`, what was made is set aside on
    the way out, before collections resume: the first young collection after would otherwise
    walk all of it (0.1 s)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if then_freeze:
            gc.freeze()
        if enabled:
            gc.enable()


def freeze() -> None:
    """Collect the young generations, then set everything still alive aside."""
    gc.collect(1)
    gc.freeze()


async def freezing(clock: Clock, interval: float) -> AsyncIterator[None]:
    """While the server runs: the restored registry set aside at once, then every `interval`
    seconds (`server.gc_freeze_interval`; 0: never)."""
    if not interval:
        yield
        return
    freeze()
    async with Loops(clock) as loops:
        loops.every(interval, freeze, name="gc_freeze")
        yield
