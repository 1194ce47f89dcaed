"""A flow is the sum of its days' counts: learning again after a new day counts only that day,
and gives the flow a full recount gives (apart from its timestamp)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stretto.model.binding import Rules
from tests.warehouse.helpers import SHOP, ingest, learned, put_log
from warehouse.counts.daycounts import PartStore
from warehouse.layout import Layout


@pytest.mark.slow  # several ingest runs
def test_a_new_day_is_counted_alone_and_the_sum_is_the_full_recount(tmp_path: Path) -> None:
    nightly, full = tmp_path / "nightly", tmp_path / "full"
    for i, log in enumerate(SHOP[:4]):
        put_log(log, nightly / "logs/shop", i % 2)  # days 0 and 1
    ingest(nightly)
    first = learned(nightly)
    for log in SHOP[4:]:
        put_log(log, nightly / "logs/shop", 2)  # the new day
    ingest(nightly)
    said: list[str] = []
    again = learned(nightly, say=said.append)
    # only the new day was counted and replayed; days 0 and 1 were read back (their rules did
    # not change: only the counts behind them did), and α's walk went on from the 4 sessions
    assert "counting 1 of 3 parts (domain and day); the others are kept" in said
    assert "replaying the bindings' picks in 1 of 3 parts (3 of 9 lookups by part)" in said
    assert "fitting α: walking up to 2 sessions after the 4 walked before" in said
    assert first["provenance"]["habit_episodes"] == 4
    assert again["provenance"]["habit_episodes"] == 6

    for i, log in enumerate(SHOP):
        put_log(log, full / "logs/shop", min(i % 2 if i < 4 else 2, 2))
    ingest(full)
    recounted = learned(full)
    assert json.dumps(again, sort_keys=True) == json.dumps(recounted, sort_keys=True)
    parts = sorted(
        p.relative_to(PartStore(Layout.at(full)).root).as_posix()
        for p in PartStore(Layout.at(full)).root.glob("shop/*")
    )
    assert len(parts) == 3


def recounted(tmp_path: Path, days: list[int]) -> dict:
    """The flow of a home that ingested SHOP[i] on day days[i] at once, counted from scratch."""
    home = tmp_path / f"full-{'-'.join(map(str, days))}"
    for log, day in zip(SHOP, days, strict=False):
        put_log(log, home / "logs/shop", day)
    ingest(home)
    return learned(home)


def same(flow: dict, other: dict) -> bool:
    return json.dumps(flow, sort_keys=True) == json.dumps(other, sort_keys=True)


@pytest.mark.slow  # several ingest runs
def test_an_earlier_day_changed_is_counted_replayed_and_walked_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for log, day in zip(SHOP[:4], [0, 1, 2, 2], strict=True):
        put_log(log, home / "logs/shop", day)
    ingest(home)
    learned(home)
    put_log(SHOP[4], home / "logs/shop", 0)  # a late log of the first day
    ingest(home)
    said: list[str] = []
    flow = learned(home, say=said.append)
    assert "counting 1 of 3 parts (domain and day); the others are kept" in said
    assert "replaying the bindings' picks in 1 of 3 parts (3 of 9 lookups by part)" in said
    # the first day's sessions changed: α's walk starts again (the late session is first)
    assert "fitting α: walking up to 5 sessions after the 0 walked before" in said
    assert same(flow, recounted(tmp_path, [0, 1, 2, 2, 0]))


@pytest.mark.slow  # several ingest runs
def test_rules_that_change_replay_only_their_lookups(tmp_path: Path) -> None:
    home = tmp_path / "home"
    put_log(SHOP[0], home / "logs/shop", 0)
    ingest(home)
    first = learned(home)
    for log in SHOP[1:3]:
        put_log(log, home / "logs/shop", 1)
    ingest(home)
    said: list[str] = []
    flow = learned(home, say=said.append)
    # with one session, get_user_details had no usable source; with three it has one: day 0
    # replays that lookup alone, the new day every lookup
    before = Rules.from_flow(first["bindings"])
    after = Rules.from_flow(flow["bindings"])
    changed = [t for t in sorted(after.calls) if before.deciding(t) != after.deciding(t)]
    assert changed == ["get_user_details"]
    assert "replaying the bindings' picks in 2 of 2 parts (4 of 6 lookups by part)" in said
    assert same(flow, recounted(tmp_path, [0, 1, 1]))
    # learned again with nothing new: nothing is counted, replayed or walked
    said.clear()
    assert same(learned(home, say=said.append), flow)
    assert not [s for s in said if s.startswith(("counting", "replaying", "fitting"))]


def test_a_part_whose_sessions_changed_is_counted_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for log in SHOP[:3]:
        put_log(log, home / "logs/shop", 0)
    ingest(home)
    learned(home)
    put_log(SHOP[3], home / "logs/shop", 0)  # one more session on the same day
    ingest(home)
    said: list[str] = []
    flow = learned(home, say=said.append)
    assert "counting 1 of 1 parts (domain and day); the others are kept" in said
    assert flow["provenance"]["habit_episodes"] == 4
    # the older count of that day is gone: one counts file per part
    folder = PartStore(Layout.at(home)).folder(
        "shop/" + next(iter(p.name for p in (PartStore(Layout.at(home)).root / "shop").iterdir()))
    )
    assert len(list(folder.glob("*.counts-*.json"))) == 1
    shutil.rmtree(tmp_path)


def test_parts_counted_a_few_at_a_time_give_the_flow_of_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warehouse.counts import agreement, partcount

    home = tmp_path / "home"
    for i, log in enumerate(SHOP):
        put_log(log, home / "logs/shop", i % 3)  # three days, two sessions each
    ingest(home)
    one_pass = learned(home)
    shutil.rmtree(PartStore(Layout.at(home)).root)
    # at most one session at a time: each part is its own chunk (a larger part alone)
    monkeypatch.setattr(partcount, "CHUNK_SESSIONS", 1)
    plan = partcount.Plan(rows=[("a", 0, "p1", 0), ("b", 1, "p1", 0), ("c", 2, "p2", 0)])
    plan.parts = ["p1", "p2"]
    assert plan.chunks(["p2", "p1"]) == [["p1"], ["p2"]]
    assert plan.chunks(["p1", "p2"], most=3) == [["p1", "p2"]]
    wanted: list[tuple[tuple[str, ...], int]] = []  # each pass: its tables, its parts

    def spied(con, rows, merged=False, tables=partcount.NARROWED) -> None:
        wanted.append((tuple(tables), len({r[2] for r in rows})))
        real(con, rows, merged, tables)

    real = partcount.set_wanted
    monkeypatch.setattr(partcount, "set_wanted", spied)
    monkeypatch.setattr(agreement, "set_wanted", spied)
    said: list[str] = []
    chunked = learned(home, say=said.append)
    assert "counting 3 of 3 parts (domain and day); the others are kept" in said
    # counting (over the steps and calls), then replaying (the calls and context): one part
    # at a time each
    assert [n for tables, n in wanted if tables == ("steps", "calls")] == [1, 1, 1]
    assert [n for tables, n in wanted if tables == ("calls", "context")] == [1, 1, 1]
    assert same(chunked, one_pass)
