"""Fault injection: ingest killed with -9 at every step of a run, runs at once, readers during
a run. After any crash the next run recovers by itself and the warehouse holds exactly what a
clean run gives; readers and the writer never block each other."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from tests.builders import wait_until
from tests.conftest import REFERENCE_HOME
from tests.warehouse.helpers import ingest, mismatches, rows
from warehouse import registry, store
from warehouse.layout import Layout

# crash and kill recovery: every test starts and kills ingest processes
pytestmark = pytest.mark.slow

STRETTO = str(Path(sys.executable).parent / "stretto")
COUNTS = (
    "SELECT (SELECT count(*) FROM sessions) AS sessions, (SELECT count(*) FROM messages) AS "
    "messages, (SELECT count(*) FROM calls) AS calls, (SELECT count(*) FROM steps) AS steps, "
    "(SELECT count(*) FROM tools) AS tools, (SELECT count(*) FROM context) AS context"
)


def new_home(path: Path) -> Path:
    shutil.copytree(REFERENCE_HOME / "logs/shop", path / "logs/shop")
    shutil.copytree(REFERENCE_HOME / "logs/retail", path / "logs/retail")
    return path


@pytest.fixture(scope="module")
def clean_counts(tmp_path_factory) -> list[dict]:
    home = new_home(tmp_path_factory.mktemp("clean") / "home")
    ingest(home)
    return rows(home, COUNTS)


def run_ingest(home: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [STRETTO, "ingest", "--home", str(home), "--wait", "120"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def listed_files(layout: Layout) -> set[Path]:
    table = registry.read(layout)
    paths = table.filter(table["kind"].to_numpy(zero_copy_only=False) == "data")["path"]
    return {layout.home / p for p in paths.to_pylist()}


def assert_tidy(layout: Layout) -> None:
    """Nothing of a crashed run is left: every Parquet file is committed, no temp files."""
    on_disk = set(layout.parquet.rglob("*.parquet"))
    assert on_disk == listed_files(layout)
    assert not layout.staging.exists() or not any(layout.staging.iterdir())
    assert not [p for p in layout.warehouse.rglob(".*") if ".tmp-" in p.name]


# (point, its n-th pass): the ingest (7 log files, one batch), then the steps
POINTS = [
    "parquet-written",  # the first table's Parquet files written under staging/
    "parquet-written:4",  # three tables moved into place, the fourth staged
    "batch-written",  # all of the batch's files in place, nothing committed
    "before-commit",  # the registry file not written
    "after-commit",  # committed, stretto.duckdb not yet rebuilt
    "before-commit:2",  # the steps in place, not committed
]


@pytest.mark.parametrize("point", POINTS)
def test_a_run_killed_at_any_point_is_recovered_by_the_next(
    tmp_path: Path, point: str, clean_counts: list[dict]
) -> None:
    home = new_home(tmp_path / "home")
    crashed = run_ingest(home, STRETTO_FAULT=point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    layout = Layout.at(home)
    # readers see a consistent warehouse at once: what the last commit holds
    committed = point in ("after-commit", "before-commit:2")
    (got,) = rows(home, COUNTS)
    assert got["sessions"] == (clean_counts[0]["sessions"] if committed else 0)
    assert got["steps"] == 0
    done = run_ingest(home)
    assert done.returncode == 0, done.stderr
    assert rows(home, COUNTS) == clean_counts
    assert mismatches(home) == []
    assert_tidy(layout)
    # and the catalogue for DuckDB clients is whole
    con = duckdb.connect(str(layout.database), read_only=True)
    try:
        n = con.execute("SELECT count(*) FROM sessions").fetchall()[0][0]
        assert n == clean_counts[0]["sessions"]
    finally:
        con.close()


def children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.add(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_killing_the_main_process_ends_its_workers_and_the_next_run_recovers(
    tmp_path: Path, clean_counts: list[dict]
) -> None:
    home = new_home(tmp_path / "home")
    layout = Layout.at(home)
    env = {
        **os.environ,
        "STRETTO_INGEST_WORKERS": "2",
        "STRETTO_INGEST_BATCH_FILES": "2",  # 7 files: 4 batches over 2 worker processes
        "STRETTO_FAULT": "pause@parquet-written",  # each worker stops mid-batch
    }
    main = subprocess.Popen(
        [STRETTO, "ingest", "--home", str(home)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: len(list(layout.staging.rglob("*.parquet"))) >= 2, "both workers staged", 120
        )
        workers = {
            p for p in children(main.pid) if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()
        }
        assert len(workers) == 2
        main.send_signal(signal.SIGKILL)
        main.wait()
        wait_until(lambda: not any(alive(p) for p in workers), "the workers ended", 120)
    finally:
        if main.poll() is None:
            main.kill()
            main.wait()
    done = run_ingest(home, STRETTO_INGEST_WORKERS="2", STRETTO_INGEST_BATCH_FILES="2")
    assert done.returncode == 0, done.stderr
    assert "removed the uncommitted files of the crashed run" in done.stderr
    assert rows(home, COUNTS) == clean_counts
    assert_tidy(layout)


def test_runs_started_together_take_turns_and_ingest_once(
    tmp_path: Path, clean_counts: list[dict]
) -> None:
    home = new_home(tmp_path / "home")
    runs = [
        subprocess.Popen(
            [STRETTO, "ingest", "--home", str(home), "--wait", "300"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], [err for _, err in outputs]
    read = sorted(int(out.split("ingested ")[1].split(" file")[0]) for out, _ in outputs)
    assert read == [0, 0, 7]
    assert rows(home, COUNTS) == clean_counts
    assert mismatches(home) == []


def test_a_second_writer_is_told_in_one_line_who_holds_the_warehouse(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    layout = Layout.at(home)
    release, held = threading.Event(), threading.Event()

    def hold() -> None:
        with store.ingest_lock(layout, 0, print):
            held.set()
            release.wait(120)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        held.wait(60)
        busy = subprocess.run(
            [STRETTO, "ingest", "--home", str(home), "--wait", "0"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        release.set()
        holder.join()
    assert busy.returncode == 1
    assert busy.stderr.count("\n") == 1, busy.stderr
    assert busy.stderr.startswith(
        f"stretto: ingest failed: another ingest run (pid {os.getpid()}, since "
    )
    assert "UTC) is writing the warehouse" in busy.stderr


def test_readers_never_block_the_writer(tmp_path: Path, clean_counts: list[dict]) -> None:
    home = tmp_path / "home"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    ingest(home)
    layout = Layout.at(home)
    # a notebook or the DuckDB CLI holding the catalogue open, read-only
    notebook = duckdb.connect(str(layout.database), read_only=True)
    try:
        before = notebook.execute("SELECT count(*) FROM sessions").fetchall()
        shutil.copytree(REFERENCE_HOME / "logs/retail", home / "logs/retail")
        stop = threading.Event()
        answers: list[int] = []

        def keep_reading() -> None:  # `stretto sql` over and over while the run goes on
            while not stop.is_set():
                done = subprocess.run(
                    [STRETTO, "sql", "--home", str(home), "SELECT count(*) AS n FROM calls"],
                    capture_output=True,
                    text=True,
                )
                answers.append(done.returncode)

        reader = threading.Thread(target=keep_reading)
        reader.start()
        try:
            done = run_ingest(home)
        finally:
            stop.set()
            reader.join()
        assert done.returncode == 0, done.stderr
        assert answers and set(answers) == {0}
        # the open connection still reads the catalogue it opened, whole
        assert notebook.execute("SELECT count(*) FROM sessions").fetchall() == before
    finally:
        notebook.close()
    assert rows(home, COUNTS) == clean_counts
