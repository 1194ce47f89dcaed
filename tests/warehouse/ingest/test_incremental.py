"""A nightly ingest costs what came in: steps are derived for the new run's sessions only,
from its own data files, and the tables equal those of a home that ingested everything at once;
the metadata's totals come from the registry's counts and equal the views' counts."""

from __future__ import annotations

import copy
import shutil
from datetime import date
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.builders import SHOP_TOOLS, LogBuilder, shop_log, write_logs
from tests.conftest import REFERENCE_HOME
from tests.warehouse.helpers import rows
from warehouse import registry, store
from warehouse.ingest.discover import discover
from warehouse.ingest.run import DRIFT, contract_drift, ingest_plan
from warehouse.ingest.steps import derive_steps, write_steps
from warehouse.layout import TABLES, Layout

DAY0_MS = 1_767_225_600_000  # 2026-01-01 UTC
STEPS = "SELECT * EXCLUDE (ingest_id) FROM steps ORDER BY session, step"


def run(layout: Layout, run_id: str) -> int:
    """One ingest run and its steps; how many steps rows it wrote."""
    ingest_plan(layout, discover(layout, store.known_state(layout)), run_id)
    return derive_steps(layout, f"{run_id}-steps")


def grow(log: Path) -> None:
    """The log gets two more lines (its session goes on): the new content extends the old."""
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines) + "".join(lines[-2:]))


def files_of(layout: Layout, run_id: str) -> list[Path]:
    table = registry.read(layout).to_pylist()
    return [
        layout.absolute(r["path"])
        for r in table
        if r["kind"] == "data" and r["ingest_id"] == run_id
    ]


@pytest.mark.slow  # several ingest runs
def test_steps_are_derived_only_for_the_new_run_and_equal_a_full_recompute(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    layout = Layout.at(home)
    run(layout, "first")
    # the next day: a new domain's logs, and one shop session that went on
    shutil.copytree(REFERENCE_HOME / "logs/retail", home / "logs/retail")
    grown = sorted((home / "logs/shop").glob("*.jsonl"))[0]
    grow(grown)
    ingest_plan(layout, discover(layout, store.known_state(layout)), "second")
    new = rows(home, "SELECT domain FROM sessions WHERE ingest_id = 'second' ORDER BY 1")
    assert [r["domain"] for r in new] == ["retail", "shop"]  # the grown session's new content
    # the first run's files are out of reach: deriving the second run's steps never opens them
    aside = tmp_path / "aside"
    moved = [(f, aside / f.relative_to(home)) for f in files_of(layout, "first")]
    moved += [(f, aside / f.relative_to(home)) for f in files_of(layout, "first-steps")]
    assert moved
    for source, target in moved:
        target.parent.mkdir(parents=True, exist_ok=True)
        source.rename(target)
    done = write_steps(layout, "second-steps")
    for source, target in moved:
        target.rename(source)
    assert done is not None
    written, data, runs = done
    assert runs == ["second"]
    store.commit_run(layout, "second-steps", [], data, derived=runs)
    expected = rows(
        home,
        "SELECT count(*) AS n FROM calls WHERE ingest_id = 'second'",
    )[0]["n"]
    assert written >= expected > 0  # a step per call (and per reply) of the new sessions only
    assert (
        written == rows(home, "SELECT count(*) AS n FROM steps WHERE ingest_id = 'second'")[0]["n"]
    )
    # nothing left to do: no rows, no commit
    commits = len(registry.commit_names(layout))
    assert derive_steps(layout, "third-steps") == 0
    assert len(registry.commit_names(layout)) == commits
    # the same as a home that ingested the same logs at once
    whole = tmp_path / "whole"
    shutil.copytree(home / "logs", whole / "logs")
    run(Layout.at(whole), "all")
    assert rows(home, STEPS) == rows(whole, STEPS)


def test_a_warehouse_from_before_the_marks_is_looked_over_once(tmp_path: Path) -> None:
    """Steps derived before steps runs marked what they did: the first run after looks over
    every session (finding each has its steps), marks them, and writes nothing."""
    home = tmp_path / "home"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    layout = Layout.at(home)
    assert run(layout, "old") > 0
    before = rows(home, STEPS)
    (name,) = [n for n in registry.commit_names(layout) if n.endswith("-old-steps.parquet")]
    path = layout.registry / name
    table = pq.read_table(path, schema=registry.SCHEMA).to_pylist()
    unmarked = [r for r in table if r["kind"] != "derived"]
    assert len(unmarked) < len(table)  # the marks were there; now gone, as in an old registry
    pq.write_table(registry.pa.Table.from_pylist(unmarked, schema=registry.SCHEMA), path)
    commits = len(registry.commit_names(layout))
    assert derive_steps(layout, "upgrade-steps") == 0
    assert len(registry.commit_names(layout)) == commits + 1  # the marks, no data
    assert derive_steps(layout, "again-steps") == 0
    assert len(registry.commit_names(layout)) == commits + 1
    assert rows(home, STEPS) == before


def view_counts(layout: Layout) -> dict[str, int]:
    con = store.open_catalogue(layout)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}
    finally:
        con.close()


def registry_counts(layout: Layout) -> dict[str, int]:
    with store.reading(layout, views=False) as read:
        return read.rows()


@pytest.mark.slow  # several ingest runs
def test_the_totals_from_the_registry_equal_the_views_counts(tmp_path: Path) -> None:
    from warehouse.upkeep import compact, retention

    home = tmp_path / "home"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    (home / "logs/shop/empty.jsonl").write_text("")  # quarantined whole
    layout = Layout.at(home)
    run(layout, "first")
    assert registry_counts(layout) == view_counts(layout)
    # a log that grew: its first version's rows are still in the files, hidden by the views
    grow(sorted((home / "logs/shop").glob("2*.jsonl"))[0])
    run(layout, "second")
    counts = view_counts(layout)
    assert registry_counts(layout) == counts
    written = sum(r["rows"] for r in registry.read(layout).to_pylist() if r["kind"] == "data")
    assert written > sum(counts.values()) - counts["quarantine"]  # some rows are hidden
    # the same after a compaction (current rows rewritten, the old files retired) ...
    compact.compact(layout, "compact")
    assert registry_counts(layout) == view_counts(layout) == counts
    # ... and after a retention run dropped every day
    retention.drop_older(layout, 1, "retain", today=date(2100, 1, 1))
    assert registry_counts(layout) == view_counts(layout)
    assert view_counts(layout)["sessions"] == 0


def tools_log(index: int, day: int, changed: str | None = None) -> LogBuilder:
    """A shop session started on `day` (days since 2026-01-01); `changed`: a tool whose input
    takes an integer instead."""
    log = shop_log(index)
    log.lines[0]["started_unix_ms"] = DAY0_MS + day * 86_400_000 + index
    if changed:
        listing = copy.deepcopy(SHOP_TOOLS)
        for tool in listing["tools"]:
            if tool["name"] == changed:
                for spec in tool["inputSchema"]["properties"].values():
                    spec["type"] = "integer"
        log.lines[2]["message"]["result"] = listing
    return log


def drift_of(layout: Layout, run_id: str) -> tuple[list[str], list[str]]:
    """The check's answer, and the same query over every file."""
    with store.reading(layout, views=False) as read:
        found = contract_drift(read, run_id)
        everything = {"tools": read.view("tools"), "sessions": read.view("sessions")}
        full = read(DRIFT.format(**everything, run=run_id)).to_pylist()
    return found, [f"{r['domain']}: {r['tool']}" for r in full if r["changed"]]


@pytest.mark.slow  # several ingest runs
def test_the_contract_check_reads_the_recent_days_and_finds_what_the_whole_would(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    layout = Layout.at(home)
    logs = home / "logs/shop"
    write_logs(logs, [tools_log(1, 0), tools_log(2, 0)])
    run(layout, "a")
    # 30 days on: the last listing is older than the window, so the whole is read
    write_logs(logs, [tools_log(3, 30, changed="get_order"), tools_log(4, 30)])
    run(layout, "b")
    assert drift_of(layout, "b") == (["shop: get_order"], ["shop: get_order"])
    # the next day: every tool was listed in the window (its latest listing unchanged)
    write_logs(logs, [tools_log(5, 31)])
    run(layout, "c")
    assert drift_of(layout, "c") == ([], [])
    write_logs(logs, [tools_log(6, 32, changed="close_order")])
    run(layout, "d")
    assert drift_of(layout, "d") == (["shop: close_order"], ["shop: close_order"])
    # the files of the first days are not needed for that answer
    aside = tmp_path / "aside"
    moved = [(f, aside / f.relative_to(home)) for f in files_of(layout, "a")]
    for source, target in moved:
        target.parent.mkdir(parents=True, exist_ok=True)
        source.rename(target)
    with store.reading(layout, views=False) as read:
        assert contract_drift(read, "d") == ["shop: close_order"]


def test_a_query_builds_the_views_it_names_or_all_when_it_looks_at_the_catalogue(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    layout = Layout.at(home)
    run(layout, "first")
    assert list(store.views_named("SELECT domain FROM Sessions s")) == ["sessions"]
    assert list(store.views_named("SELECT count(*) FROM steps JOIN calls USING (session)")) == [
        "calls",
        "steps",
    ]
    assert list(store.views_named("SELECT 1")) == list(TABLES)
    listed = store.query(layout, "SELECT view_name FROM duckdb_views() WHERE NOT internal")
    assert set(listed.column("view_name").to_pylist()) >= set(TABLES)
    assert rows(home, "SELECT count(*) AS n FROM sessions") == [{"n": 6}]
