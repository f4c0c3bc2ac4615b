"""One server process per data directory (registry/store/lock.py)."""

from __future__ import annotations

import os

import pytest

from registry.store.lock import DataDirInUse, lock_data_dir


def test_a_second_lock_on_a_directory_is_refused_until_the_first_is_let_go(tmp_path):
    first = lock_data_dir(tmp_path / "data")  # made if missing
    try:
        with pytest.raises(DataDirInUse, match=f"in use by process {os.getpid()}"):
            lock_data_dir(tmp_path / "data")
    finally:
        os.close(first)
    os.close(lock_data_dir(tmp_path / "data"))


def test_other_directories_are_free(tmp_path):
    """A lock on one directory neither stops nor frees a lock on another."""
    first = lock_data_dir(tmp_path / "a")
    try:
        second = lock_data_dir(tmp_path / "b")  # no DataDirInUse
        try:
            with pytest.raises(DataDirInUse):
                lock_data_dir(tmp_path / "a")  # still held
        finally:
            os.close(second)
    finally:
        os.close(first)
