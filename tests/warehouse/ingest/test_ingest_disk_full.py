"""Ingest on a full disk says so in one line and exits 1 (it printed Dagster's 30-line trace),
and the next run, with room again, ingests everything.

Two real faults, as tests/smalldisk.py makes them: a small tmpfs holding the home
(ENOSPC; needs root to mount, else skipped), and a file-size limit on the command's process
(RLIMIT_FSIZE: a write past it fails with EFBIG; Python ignores SIGXFSZ)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PYTHON, REFERENCE_HOME
from tests.smalldisk import SET_FSIZE_AND_EXEC, SmallDisk
from tests.smalldisk import tmpfs as tmpfs  # noqa: F401 - the fixture, shared
from tests.warehouse.helpers import rows

STRETTO = str(Path(sys.executable).parent / "stretto")
LOGS = REFERENCE_HOME / "logs/shop"


@pytest.fixture(params=["tmpfs", "fsize"])
def disk(request, tmp_path: Path) -> SmallDisk:
    if request.param == "tmpfs":
        return SmallDisk("tmpfs", request.getfixturevalue("tmpfs"))
    return SmallDisk("fsize", tmp_path)


def ingest(disk: SmallDisk) -> subprocess.CompletedProcess:
    argv = [STRETTO, "ingest", "--home", str(disk.root)]
    if disk.kind == "fsize":
        argv = [PYTHON, "-c", SET_FSIZE_AND_EXEC, str(disk.room), *argv]
    env = dict(os.environ, DAGSTER_HOME=str(disk.root.parent / "dagster"))
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow  # a whole ingest in a subprocess, twice per fault
def test_ingest_on_a_full_disk_says_so_in_one_line_and_exits_1(disk: SmallDisk) -> None:
    shutil.copytree(LOGS, disk.root / "logs/shop")
    disk.leave_room(64 * 1024)  # the logs fit; the warehouse does not
    done = ingest(disk)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("stretto: ingest failed: no room to write: ")
    assert "Traceback" not in done.stderr and "Stack Trace" not in done.stderr
    assert "No space left on device" in done.stderr or "File too large" in done.stderr
    # with room again, the next run ingests every log
    if disk.kind == "tmpfs":
        disk.free()
    else:
        disk.room = 1 << 40
    again = ingest(disk)
    assert again.returncode == 0, again.stderr
    sessions = rows(disk.root, "SELECT count(*) AS n FROM sessions")[0]["n"]
    assert sessions == len(list(LOGS.glob("*.jsonl")))
