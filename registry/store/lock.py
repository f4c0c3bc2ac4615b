"""One server process per data directory.

Two servers started on one directory both ran and wrote one SQLite file: each restored, served
and evicted its own half of the registry, and a restart brought back the union. The first
process now holds an exclusive lock on `registry.lock` in the directory for as long as it runs
(an advisory `flock`, released by the system however the process ends, a SIGKILL included);
the second is refused at start-up, naming the holder.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = "registry.lock"


class DataDirInUse(Exception):
    """Another process holds the data directory."""


def lock_data_dir(directory: Path) -> int:
    """Lock `directory` (made if missing) for this process; the descriptor to close when done.
    Blocking file calls: run it off the event loop."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise DataDirInUse(
            f"{directory} is in use by process {holder} (it holds {path}): give each server "
            "a data directory of its own (data_dir)"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd
