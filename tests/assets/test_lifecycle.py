"""The ingest job's drift check, materialized for real: it scores only the sessions it has not
scored under the served flow (its cache under warehouse/drift/), and its report is the one
drift computes afresh from every session's log — after new sessions, after another flow is
served, and from a cache that was spoiled."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from assets.ingest import INGEST_ASSETS
from assets.lifecycle import domain_sessions, drift_cache, drift_check
from pipeline.run import materialize
from stretto.model.flow import load_flow
from stretto.offline.lifecycle.drift import drift
from tests.stretto.offline.lifecycle.lifecycle import learn_folder, write_sessions
from warehouse.counts.learn import warehouse_episodes
from warehouse.layout import Layout


def evaluation(home: Path):
    result = materialize([*INGEST_ASSETS, drift_check], str(home), 0)
    assert result.success
    (found,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "drift"]
    return found


def check(home: Path) -> dict:
    """One ingest run with the drift check: the check's figures for the shop."""
    found = evaluation(home)
    return {"passed": found.passed, **found.metadata["domains"].value["shop"]}


def as_fresh(home: Path, figures: dict) -> None:
    """The check's report data is drift's on every session read from its log."""
    layout = Layout.at(home)
    fresh = drift(load_flow(home / "flows/shop.flow.json"), warehouse_episodes(layout, "shop"))
    reported = json.loads(Path(figures["report"]).with_name("drift.json").read_text())
    assert reported == json.loads(json.dumps(fresh.as_json()))
    assert figures["sounding"] == fresh.sounding and figures["sessions"] == len(fresh.sessions)


@pytest.mark.slow  # four ingest runs with the check, and a flow learned between them
def test_the_drift_check_scores_only_what_it_has_not_scored_under_the_served_flow(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    write_sessions(home / "logs/shop", ["usual"] * 30, seed=1)
    learn_folder(home / "logs/shop", home / "flows/shop.flow.json", tmp_path / "learning")

    first = check(home)
    assert first["passed"] and first["scored"] == 30
    as_fresh(home, first)
    cache = drift_cache(Layout.at(home), "shop")
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    held = domain_sessions(Layout.at(home))["shop"]
    assert sorted(s.id for s in held) == [f"s-{i:04d}" for i in range(30)]
    assert len(json.loads(cache.read_text())["sessions"]) == 30

    # the agent changed: five new sessions, only they are read; the alarm sounds
    write_sessions(home / "logs/shop", ["changed"] * 5, seed=9, start=30)
    changed = check(home)
    assert not changed["passed"] and changed["scored"] == 5 and changed["sessions"] == 35
    as_fresh(home, changed)

    # a relearned flow served: every session is scored again under it
    learn_folder(home / "logs/shop", home / "flows/shop.flow.json", tmp_path / "learning")
    relearned = check(home)
    assert relearned["scored"] == 35
    as_fresh(home, relearned)

    # a spoiled cache is not trusted
    cache.write_bytes(cache.read_bytes()[:100])
    spoiled = check(home)
    assert spoiled["scored"] == 35
    as_fresh(home, spoiled)


@pytest.mark.slow  # two ingest runs with the check, and a flow learned between them
def test_the_first_check_under_a_flow_reads_no_log_gathered_before(tmp_path: Path) -> None:
    """An ingest before any flow is served keeps its sessions' facts (the check has nothing to
    score yet); the first check under the flow then reads no log, and its report is the one
    drift computes afresh from every log."""
    home = tmp_path / "home"
    write_sessions(home / "logs/shop", ["usual"] * 20 + ["changed"] * 4, seed=3)
    before = evaluation(home)
    assert before.passed and before.metadata["domains"].value == {}
    assert before.metadata["facts gathered (logs read)"].value == {"shop": 24}
    assert not drift_cache(Layout.at(home), "shop").exists()

    learn_folder(home / "logs/shop", home / "flows/shop.flow.json", tmp_path / "learning")
    first = check(home)
    assert (first["scored"], first["logs read"]) == (24, 0)
    as_fresh(home, first)


def test_the_check_scores_only_each_domains_newest_sessions(tmp_path: Path) -> None:
    """With drift_sessions, the check is drift on the newest sessions alone (its cost does not
    grow with the archive), and its caches hold only those."""
    import dagster as dg

    from assets.resources import StrettoHome

    home = tmp_path / "home"
    write_sessions(home / "logs/shop", ["usual"] * 20 + ["other"] * 8, seed=3)
    learn_folder(home / "logs/shop", home / "flows/shop.flow.json", tmp_path / "learning")
    resource = StrettoHome(home=str(home), wait_seconds=0, drift_sessions=12)
    result = dg.materialize([*INGEST_ASSETS, drift_check], resources={"stretto": resource})
    (found,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "drift"]
    figures = found.metadata["domains"].value["shop"]
    assert figures["sessions"] == figures["scored"] == 12

    layout = Layout.at(home)
    newest = warehouse_episodes(layout, "shop")[-12:]
    fresh = drift(load_flow(home / "flows/shop.flow.json"), newest)
    reported = json.loads(Path(figures["report"]).with_name("drift.json").read_text())
    assert reported == json.loads(json.dumps(fresh.as_json()))
    assert [s["id"] for s in reported["sessions"]] == [e.id for e in newest]
    cached = json.loads(drift_cache(layout, "shop").read_text())["sessions"]
    assert sorted(k.split("\t")[0] for k in cached) == sorted(e.id for e in newest)


def test_the_checks_session_count_must_be_positive(tmp_path: Path) -> None:
    import dagster as dg

    from assets.resources import StrettoHome

    home = tmp_path / "home"
    write_sessions(home / "logs/shop", ["usual"] * 3, seed=1)
    resource = StrettoHome(home=str(home), wait_seconds=0, drift_sessions=0)
    result = dg.materialize(
        [*INGEST_ASSETS, drift_check], resources={"stretto": resource}, raise_on_error=False
    )
    failures = [e for e in result.all_events if e.is_step_failure]
    assert failures and "drift_sessions must be at least 1, not 0" in str(
        failures[0].event_specific_data.error
    )
