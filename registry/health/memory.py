"""A memory watermark: above it, clients' registrations of new instances are refused (503)
rather than the process growing until the system kills it, and every instance with it.

The process's resident memory is read once a second (Linux: /proc/self/statm). The watermark is
`limits.memory_watermark_mb`, or, left at 0, 90 % of the container's memory limit (cgroup v2
`memory.max`, or v1 `memory.limit_in_bytes`), and none when there is no limit to find.
Heartbeats, re-registrations, cancels and peers' replication are never refused: they do not
grow the registry, or the peer has taken the instance already.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

from registry.common.clock import Clock
from registry.common.tasks import Loops

OF_THE_LIMIT = 0.9
_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)
_NO_LIMIT = 1 << 60  # what cgroup v1 says when there is none


class MemoryGuard:
    def __init__(self, watermark_bytes: int) -> None:
        self.watermark = watermark_bytes  # 0: none
        self.resident = 0  # bytes, as last read

    async def running(self, clock: Clock, setting_mb: int) -> AsyncIterator[None]:
        """While the server runs: the watermark found as it starts, then the resident memory
        read every second (none without a watermark)."""
        self.watermark = await asyncio.to_thread(watermark, setting_mb)
        if not self.watermark:
            yield
            return
        async with Loops(clock) as loops:
            loops.every(1.0, lambda: asyncio.to_thread(self.sample), name="memory")
            yield

    def sample(self) -> None:
        """Read the resident memory (a file read: call it from a thread)."""
        self.resident = resident_bytes()

    @property
    def full(self) -> bool:
        return bool(self.watermark) and self.resident > self.watermark


def watermark(setting_mb: int) -> int:
    """The watermark in bytes: the setting's, or 90 % of the container's limit, or 0."""
    if setting_mb:
        return setting_mb * 1024 * 1024
    for path in _CGROUP_LIMITS:
        try:
            raw = path.read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < _NO_LIMIT:
            return int(int(raw) * OF_THE_LIMIT)
    return 0


def resident_bytes() -> int:
    """This process's resident memory, 0 where it cannot be read."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")
