"""A disk with little room, for the tests of what happens when it fills: a real tmpfs (as
root) or a file-size limit set on the process before it starts (shared by the proxy's and the
ingest's disk-full tests)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PYTHON

SET_FSIZE_AND_EXEC = (
    "import os, resource, sys\n"
    "limit = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class SmallDisk:
    """Where the logs go, and how much of them fits."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root
        self.logs = root / "logs"
        self.room: int | None = None
        self._filler = root / "filler"

    def leave_room(self, room: int) -> None:
        """Let the log hold about `room` bytes (a whole number of pages on tmpfs)."""
        self.room = room
        if self.kind == "tmpfs":
            self.logs.mkdir(mode=0o700, exist_ok=True)
            stats = os.statvfs(self.root)
            free = stats.f_bavail * stats.f_frsize
            with open(self._filler, "wb") as f:
                f.write(b"\0" * (free - room))

    def command(self, argv: list[str]) -> list[str]:
        if self.kind == "tmpfs":
            return argv
        return [PYTHON, "-c", SET_FSIZE_AND_EXEC, str(self.room), *argv]

    def free(self) -> None:
        self._filler.unlink()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "tmpfs"
    root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(root)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=True)
