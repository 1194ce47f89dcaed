"""What the tests of private writes share: a umask set for a block, and the entries under a
folder that are not private (0700 folders, 0600 files)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def loose(root: Path) -> dict[str, str]:
    """Every entry under root (root too) that is not private, with its mode."""
    found = {}
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            continue
        want = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
        if stat.S_IMODE(info.st_mode) != want:
            found[str(path.relative_to(root))] = oct(stat.S_IMODE(info.st_mode))
    return found
