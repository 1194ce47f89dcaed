"""Writing files so that a crash at any moment leaves either the old state or the new one:
write to a temporary name beside the target, fsync, set the mode, rename, fsync the folder.
Everything is private (stretto.home): 0600 files, 0700 folders."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path

from stretto.home import make_private, private_dirs

TEMP_MARK = ".tmp-"  # temporary files are named .<name>.tmp-<pid>; readers never list them


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


def fsync_path(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_beside(path: Path) -> Path:
    return path.parent / f".{path.name}{TEMP_MARK}{os.getpid()}"


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """`write(temp)` writes the content; it appears at `path` whole, or not at all."""
    private_dirs(path.parent)
    temp = temp_beside(path)
    try:
        write(temp)
        fsync_path(temp)
        make_private(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


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
