"""What the console writes, and where: only under the data directory's `console/` (jobs,
trash, settings) and the flows it is asked to write. Files 0600, folders 0700; nothing is
ever unlinked: a deleted session or flow moves to `console/trash/<time>/`."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path


class Refused(ValueError):
    """A path the console will not touch (outside the data directory, or its own folders)."""


def private_dir(path: Path) -> Path:
    """Make `path` (and missing parents) with mode 0700."""
    missing = []
    for folder in [path, *path.parents]:
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
    return path


def write_private(path: Path, data: bytes | str) -> None:
    """Write a file atomically with mode 0600."""
    private_dir(path.parent)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, value) -> None:
    write_private(path, json.dumps(value, indent=1, ensure_ascii=False) + "\n")


def inside(data: Path, relative: str) -> Path:
    """`relative` resolved under the data directory; Refused when it leaves it."""
    if not relative or relative.startswith("/") or "\x00" in relative:
        raise Refused(f"{relative!r}: give a path relative to the data directory")
    path = (data / relative).resolve()
    if path != data and data not in path.parents:
        raise Refused(f"{relative!r}: outside the data directory")
    return path


def stamp() -> str:
    """A UTC time for folder names, unique to the microsecond."""
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now * 1e6) % 1_000_000:06d}Z"


def move_to_trash(data: Path, paths: list[Path]) -> Path:
    """Move files (keeping their path under the data directory) to console/trash/<time>/;
    the folder they went to."""
    folder = private_dir(data / "console" / "trash" / stamp())
    for path in paths:
        relative = path.resolve().relative_to(data)
        target = folder / relative
        private_dir(target.parent)
        shutil.move(str(path), target)
    return folder


def copy_to_trash(data: Path, path: Path) -> Path:
    """Keep a copy of a file about to be replaced in console/trash/<time>/."""
    target = data / "console" / "trash" / stamp() / path.resolve().relative_to(data)
    private_dir(target.parent)
    shutil.copy2(path, target)
    os.chmod(target, 0o600)
    return target
