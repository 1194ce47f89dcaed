"""A nightly ingest costs what came in: steps are derived for the new run's sessions only,
from its own data files, and the tables equal those of a home that ingested everything at once;
the metadata's totals come from the registry's counts and equal the views' counts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq

from tests.conftest import REFERENCE_HOME
from tests.warehouse.helpers import rows
from warehouse import registry, store
from warehouse.discover import discover
from warehouse.layout import Layout

STEPS = "SELECT * EXCLUDE (ingest_id) FROM steps ORDER BY session, step"


def run(layout: Layout, run_id: str) -> int:
    """One ingest run and its steps; how many steps rows it wrote."""
    store.ingest_run(layout, discover(layout, store.known_state(layout)), run_id)
    return store.derive_steps(layout, f"{run_id}-steps")


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


def test_steps_are_derived_only_for_the_new_run_and_equal_a_full_recompute(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    layout = Layout.at(home)
    run(layout, "first")
    # the next day: a new domain's logs, and one shop session that went on
    shutil.copytree(REFERENCE_HOME / "logs/retail", home / "logs/retail")
    grown = sorted((home / "logs/shop").glob("*.jsonl"))[0]
    grow(grown)
    store.ingest_run(layout, discover(layout, store.known_state(layout)), "second")
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
    done = store.write_steps(layout, "second-steps")
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
    assert store.derive_steps(layout, "third-steps") == 0
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
    assert store.derive_steps(layout, "upgrade-steps") == 0
    assert len(registry.commit_names(layout)) == commits + 1  # the marks, no data
    assert store.derive_steps(layout, "again-steps") == 0
    assert len(registry.commit_names(layout)) == commits + 1
    assert rows(home, STEPS) == before
