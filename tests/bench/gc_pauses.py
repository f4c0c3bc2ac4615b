"""Garbage collections timed while a figure is measured: a full one walks every object and
holds the event loop up, a cause of a figure's tail to tell apart."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator


@contextlib.contextmanager
def collections() -> Iterator[list[tuple[int, float]]]:
    """The garbage collections that run inside the block: (generation, milliseconds) each."""
    pauses: list[tuple[int, float]] = []
    started = 0.0

    def callback(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        if phase == "start":
            started = time.perf_counter()
        else:
            pauses.append((info["generation"], 1000 * (time.perf_counter() - started)))

    gc.callbacks.append(callback)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(callback)
