"""Staged relearning: the staged flow learned beside the served one, each new session scored
out of sample by both, and what committing would change."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stretto.logs.merged import read_episodes
from stretto.model.flow import dumps, load_flow, write_flow
from stretto.offline.lifecycle import versions
from stretto.offline.lifecycle.promote import score
from stretto.offline.lifecycle.stage import interval, markdown, score_session, stage, state_path
from tests.builders import LogBuilder
from tests.stretto.offline.lifecycle.lifecycle import learn_folder, learner, write_sessions

TRAIN, NEW = 8, 4


@pytest.fixture
def setup(tmp_path) -> tuple[Path, Path]:
    """A flow learned from sessions of the usual habit, and a folder holding those and then
    sessions of a changed habit."""
    sessions = tmp_path / "sessions"
    write_sessions(sessions, ["usual"] * TRAIN, seed=11, customers=2)
    flow_path = tmp_path / "flows" / "shop.flow.json"
    flow_path.parent.mkdir()
    learn_folder(sessions, flow_path, tmp_path / "home")
    write_sessions(sessions, ["changed"] * NEW, seed=12, customers=2, start=TRAIN)
    return flow_path, sessions


@pytest.mark.slow  # learns once per new session
def test_stage_scores_each_new_session_out_of_sample_and_reports(setup, tmp_path) -> None:
    flow_path, sessions = setup
    committed = load_flow(flow_path)
    committed["thresholds"] = {"find_account": 0.4}
    write_flow(committed, flow_path)
    episodes = read_episodes(sessions)
    learn = learner(tmp_path / "learn")
    result = stage(flow_path, episodes, learn, window=NEW, settings={"half_life": None})
    # one flow learned before each new session, and the staged flow from all of them
    assert learn.calls[0] == NEW + 1 and result.scored_now == NEW
    staged = load_flow(versions.staged_path(flow_path))
    assert staged == result.staged and staged["thresholds"] == {"find_account": 0.4}
    assert staged["provenance"]["habit_episodes"] == TRAIN + NEW
    assert [r["id"] for r in result.rows] == [e.id for e in episodes[TRAIN:]]
    assert [r["staged_from"] for r in result.rows] == [8, 9, 10, 11]
    # the first new session: the staged flow had learned from the committed flow's sessions
    first = result.rows[0]
    assert first["staged"] == first["committed"]
    # the scores are promote's, counted per site
    assert first["committed"] == score_session(committed, episodes[TRAIN])
    tally = score(committed, [episodes[TRAIN]]).sites
    assert {s: t["lookups"] for s, t in first["committed"].items()} == {
        s: t.lookups for s, t in tally.items()
    }
    # the agent now reads the returns after the account: the committed flow's reads of the
    # orders there are detours; the staged flow learns the new habit as the sessions come
    totals = result.totals()
    assert totals["committed"]["detours"] > 0
    assert totals["staged"]["used"] > totals["committed"]["used"]
    site = {r["site"]: r for r in result.sites()}["get_account"]
    assert site["staged"]["used"] > 0 and site["staged"]["interval"][0] > 0
    assert "a new lookup after get_account: get_returns" in result.review
    text = markdown(result)
    assert "| committed |" in text and "a new lookup after get_account: get_returns" in text
    json.dumps(result.as_json())

    # again with one more session: only it is scored (and the staged flow relearned)
    write_sessions(sessions, ["changed"], seed=13, customers=2, start=TRAIN + NEW)
    again = stage(flow_path, read_episodes(sessions), learn, window=NEW)
    assert again.scored_now == 1 and learn.calls[0] == NEW + 1 + 2
    assert [r["id"] for r in again.rows] == [e.id for e in read_episodes(sessions)[-NEW:]]
    state = json.loads(state_path(flow_path).read_text())
    assert len(state["sessions"]) == NEW + 1 and state["settings"]["window"] == NEW


def test_served_lookups_are_neither_used_nor_detours(setup, tmp_path) -> None:
    """A lookup the proxy already made in the session: the agent had no reason to repeat it."""
    flow_path, _ = setup
    flow = load_flow(flow_path)
    b = LogBuilder()
    b.lines[0] = {**b.lines[0], "session": "served", "domain": "shop"}
    b.say(0, "user", "Hi, I'm c1@example.com.")
    b.client_call(10, 1, "find_account", email="c1@example.com").result(11, 1, "acct_1")
    b.proxy_call(12, "stretto-1", "get_account", account="acct_1")
    b.result(13, "stretto-1", json.dumps({"account": "acct_1", "orders": ["#W1"]}))
    b.client_call(1000, 2, "get_order", order="#W1").result(1001, 2, '{"status": "open"}')
    sites = score_session(flow, b.episode(tmp_path))
    assert sites["find_account"]["lookups"] == 1
    assert sites["find_account"]["served"] == 1
    assert sites["find_account"]["used"] == sites["find_account"]["detours"] == 0


def test_the_better_rule_and_the_interval() -> None:
    from stretto.offline.lifecycle.stage import Stage

    flow = {"manifest": {"domain": "d"}}
    rows = [
        {"committed": {"a": _t(used=1, detours=2)}, "staged": {"a": _t(used=2, detours=0)}},
        {"committed": {"a": _t(used=1, detours=1)}, "staged": {"a": _t(used=2, detours=1)}},
        {"committed": {"a": _t(used=0, detours=1)}, "staged": {"a": _t(used=1, detours=0)}},
    ]
    result = Stage(flow, Path("x"), flow, rows, 0)
    totals = result.totals()
    assert totals["difference"]["mean"] == pytest.approx((3 + 1 + 2) / 3)
    low, high = totals["difference"]["interval"]
    assert low > 0 and totals["better"]
    rows.append({"committed": {"a": _t(used=3, detours=0)}, "staged": {"a": _t(detours=4)}})
    assert not Stage(flow, Path("x"), flow, rows, 0).totals()["better"]
    assert interval(0, 0) is None
    low, high = interval(7, 10)
    assert 0.4 < low < 0.7 < high < 0.9


def _t(used: int = 0, detours: int = 0, served: int = 0) -> dict:
    return {
        "decisions": used + detours + served,
        "lookups": used + detours + served,
        "used": used,
        "detours": detours,
        "served": served,
    }


def test_bad_input_is_refused(setup, tmp_path) -> None:
    flow_path, sessions = setup
    learn = learner(tmp_path / "learn")
    with pytest.raises(ValueError, match="--window wants at least 1"):
        stage(flow_path, read_episodes(sessions), learn, window=0)
    with pytest.raises(ValueError, match="no sessions"):
        stage(flow_path, [], learn)
    state_path(flow_path).write_text("{")
    with pytest.raises(ValueError, match="shop.stage.json: not JSON"):
        stage(flow_path, read_episodes(sessions), learn)
    assert learn.calls[0] == 0
    shutil.rmtree(sessions)
    assert dumps(load_flow(flow_path))
