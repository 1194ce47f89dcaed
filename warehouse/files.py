"""Writing files so that a crash at any moment leaves either the old state or the new one:
write to a temporary name beside the target, fsync, set the mode, rename, fsync the folder.
Everything is private (stretto.home): 0600 files, 0700 folders."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path

from stretto.home import TEMP_MARK, fsync_path, private_dirs, temp_beside, write_private

__all__ = ["TEMP_MARK", "fsync_path", "temp_beside"]


_fault_hits: dict[str, int] = {}


def fault(point: str) -> None:
    """Fault injection for tests/warehouse/test_faults.py. STRETTO_FAULT=<point>[:<n>]: the
    process kills itself (SIGKILL, as a power cut or the OOM killer would) the n-th time
    (default the first) it passes that point; pause@<point>: it stops there until killed."""
    wanted = os.environ.get("STRETTO_FAULT")
    if not wanted:
        return
    pause = wanted.startswith("pause@")
    name, _, nth = wanted.removeprefix("pause@").partition(":")
    if name != point:
        return
    _fault_hits[point] = _fault_hits.get(point, 0) + 1
    if _fault_hits[point] != int(nth or 1):
        return
    if pause:
        while True:
            signal.pause()
    os.kill(os.getpid(), signal.SIGKILL)


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """`write(temp)` writes the content; it appears at `path` whole, or not at all
    (stretto.home.write_private, in a folder of the warehouse's own: made private)."""
    private_dirs(path.parent)
    write_private(path, write)


def move_in(moves: Iterable[tuple[Path, Path]]) -> None:
    """Move finished files (already fsynced) to their places, each by one rename, then fsync
    the folders they went to."""
    folders: set[Path] = set()
    for source, target in moves:
        if target.parent not in folders:
            private_dirs(target.parent)
            folders.add(target.parent)
        os.replace(source, target)
    for folder in folders:
        fsync_path(folder)


def remove_stale_temps(folder: Path) -> None:
    """Temporary files a crashed process left in `folder`."""
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.name.startswith(".") and TEMP_MARK in entry.name:
                entry.unlink(missing_ok=True)
