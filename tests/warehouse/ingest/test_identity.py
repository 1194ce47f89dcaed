"""A session is its session id and its content, never its path: copies, moves, archives and a
moved home change nothing; another content under the same id is kept apart, with a reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REFERENCE_HOME
from tests.warehouse.helpers import ingest, mismatches, rows

COUNTS = (
    "SELECT (SELECT count(*) FROM sessions) AS sessions, (SELECT count(*) FROM messages) AS "
    "messages, (SELECT count(*) FROM calls) AS calls, (SELECT count(*) FROM steps) AS steps, "
    "(SELECT count(*) FROM quarantine) AS quarantine"
)


def shop_home(path: Path) -> Path:
    shutil.copytree(REFERENCE_HOME / "logs/shop", path / "logs/shop")
    return path


@pytest.mark.slow  # several ingest runs
def test_a_log_copied_into_several_folders_is_one_session(tmp_path: Path) -> None:
    once = shop_home(tmp_path / "once")
    ingest(once)
    expected = rows(once, COUNTS)
    thrice = shop_home(tmp_path / "thrice")
    shutil.copytree(thrice / "logs/shop", thrice / "logs/copy")
    shutil.copytree(thrice / "logs/shop", thrice / "logs/shop/again")
    meta = ingest(thrice)
    assert meta["files read"] == 6 and meta["files already in (same content)"] == 12
    assert rows(thrice, COUNTS) == expected
    assert mismatches(thrice) == []


def test_moving_or_archiving_logs_changes_nothing(tmp_path: Path) -> None:
    home = shop_home(tmp_path / "home")
    ingest(home)
    before = rows(home, COUNTS)
    archive = home / "logs/archive/shop"
    archive.mkdir(parents=True)
    moved = sorted((home / "logs/shop").glob("*.jsonl"))[:4]
    for log in moved:
        log.rename(archive / log.name)
    meta = ingest(home)
    assert meta["files read"] == 0 and meta["lines read"] == 0
    assert rows(home, COUNTS) == before
    # the sessions view shows where each log is now
    files = {r["file"] for r in rows(home, "SELECT file FROM sessions")}
    assert {f"logs/archive/shop/{log.name}" for log in moved} <= files
    assert mismatches(home) == []


@pytest.mark.slow  # several ingest runs
def test_another_content_with_the_same_session_id_is_quarantined_with_the_reason(
    tmp_path: Path,
) -> None:
    home = shop_home(tmp_path / "home")
    ingest(home)
    before = rows(home, COUNTS)
    original = sorted((home / "logs/shop").glob("*.jsonl"))[0]
    lines = original.read_text().splitlines(keepends=True)
    session = json.loads(lines[0])["session"]
    other = home / "logs/elsewhere" / original.name
    other.parent.mkdir(parents=True)
    other.write_text("".join(lines[:3] + lines[4:]))  # one line less, not a prefix
    meta = ingest(home)
    assert meta["lines quarantined"] == len(lines) - 1
    quarantined = rows(home, "SELECT DISTINCT file, error FROM quarantine")
    assert quarantined == [
        {
            "file": f"logs/elsewhere/{original.name}",
            "error": f"session `{session}` is already in the warehouse from "
            f"logs/shop/{original.name}, with other content: this copy is not ingested "
            "(give it a session id of its own to keep both)",
        }
    ]
    after = rows(home, COUNTS)[0]
    assert {**after, "quarantine": 0} == {**before[0], "quarantine": 0}
    (kept,) = rows(home, f"SELECT file FROM sessions WHERE session = '{session}'")
    assert kept["file"] == f"logs/shop/{original.name}"
    assert mismatches(home) == []


@pytest.mark.slow  # several ingest runs
def test_a_log_that_grew_replaces_its_rows_wherever_it_is_and_earlier_copies_add_nothing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    source = sorted((REFERENCE_HOME / "logs/shop").glob("*.jsonl"))[0]
    lines = source.read_text().splitlines(keepends=True)
    live = home / "logs/shop" / source.name
    live.parent.mkdir(parents=True)
    live.write_text("".join(lines[:6]))  # ingested while the session was still running
    ingest(home)
    assert rows(home, "SELECT count(*) AS n FROM messages") == [{"n": 5}]
    # the whole log is archived; the early copy stays where it was
    archived = home / "logs/archive" / source.name
    archived.parent.mkdir(parents=True)
    archived.write_text("".join(lines))
    meta = ingest(home)
    assert meta["lines quarantined"] == 0 and meta["files read"] == 1
    assert rows(home, "SELECT count(*) AS n, min(file) AS file FROM sessions") == [
        {"n": 1, "file": f"logs/archive/{source.name}"}
    ]
    assert rows(home, "SELECT count(*) AS n FROM messages") == [{"n": len(lines) - 1}]
    # an early copy found later is the start of what is in: nothing to add, nothing lost
    early = home / "logs/backup" / source.name
    early.parent.mkdir(parents=True)
    early.write_text("".join(lines[:9]))
    meta = ingest(home)
    assert meta["files read"] == 0 and meta["lines quarantined"] == 0
    assert rows(home, "SELECT count(*) AS n FROM messages") == [{"n": len(lines) - 1}]
    assert mismatches(home) == []


@pytest.mark.slow  # ingests, moves and ingests again
def test_the_whole_home_can_be_moved_or_copied(tmp_path: Path) -> None:
    home = shop_home(tmp_path / "home")
    ingest(home)
    before = rows(home, COUNTS)
    moved = tmp_path / "moved"
    home.rename(moved)
    assert rows(moved, COUNTS) == before  # stretto's readers never pinned the old place
    assert mismatches(moved) == []
    assert ingest(moved)["files read"] == 0
    # the run put the catalogue for DuckDB clients right (its views read the new place)
    con = duckdb.connect(str(moved / "warehouse/stretto.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM calls").fetchall() == [(before[0]["calls"],)]
    finally:
        con.close()
    copied = tmp_path / "copied"
    shutil.copytree(moved, copied)
    assert ingest(copied)["files read"] == 0
    assert rows(copied, COUNTS) == before
