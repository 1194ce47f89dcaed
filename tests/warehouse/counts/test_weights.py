"""`learn --half-life` and `--rewards`: which sessions train the habit and how much each
counts, on a small DuckDB table (warehouse/sql/weights.sql)."""

from __future__ import annotations

import json

import duckdb
import pytest

from stretto.logs.rewards import read_rewards, successful
from stretto.logs.sessionlog import LogError
from warehouse.counts.learn import count_steps
from warehouse.counts.weights import choose_sessions, half_life_weights, weighted_counts

# session, started, header reward, domain, steps (action, kind, outcome)
SESSIONS = [
    ("a", 10, None, "shop", [("find", "tool", "ok"), ("get", "tool", "ok")]),
    ("b", 20, 0.0, "shop", [("find", "tool", "ok"), ("close", "tool", "ok")]),
    ("c", 30, None, "shop", [("find", "tool", "failed"), ("find", "tool", "ok")]),
    (
        "d",
        40,
        1.0,
        "shop",
        [("find", "tool", "ok"), ("get", "tool", "ok"), ("respond", "reply", "end")],
    ),
    ("x", 25, None, "other", [("find", "tool", "ok")]),
]
KINDS = {"find": "read", "get": "read", "close": "write"}
STEPS_QUERY = (
    "SELECT s.session, s.step, s.action, s.kind, s.outcome, w.session_order "
    "FROM steps s JOIN wanted w USING (session)"
)


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE sessions (session VARCHAR, agent_model VARCHAR, started_unix_ms BIGINT, "
        "reward DOUBLE, domain VARCHAR)"
    )
    con.execute(
        "CREATE TABLE steps (session VARCHAR, step INTEGER, action VARCHAR, kind VARCHAR, "
        "outcome VARCHAR)"
    )
    for session, started, reward, domain, steps in SESSIONS:
        con.execute(
            "INSERT INTO sessions VALUES (?, 'm', ?, ?, ?)", [session, started, reward, domain]
        )
        for i, (action, kind, outcome) in enumerate(steps):
            con.execute(
                "INSERT INTO steps VALUES (?, ?, ?, ?, ?)", [session, i, action, kind, outcome]
            )
    yield con
    con.close()


def test_without_a_half_life_the_weighted_counts_are_the_counts(con) -> None:
    rows = choose_sessions(con, domain="shop")
    # b failed (its log's reward 0): left out; the others in start order, each weighing 1
    assert [(s, order, w) for s, _, order, w in rows] == [
        ("a", 0, 1.0),
        ("c", 1, 1.0),
        ("d", 2, 1.0),
    ]
    counts = count_steps(con, STEPS_QUERY, KINDS)
    habit, reach = weighted_counts(con)
    assert habit == counts.habit and reach == counts.reach
    assert habit[("find",)] == {"get": 2.0}


def test_a_half_life_weighs_older_sessions_less(con) -> None:
    rows = choose_sessions(con, domain="shop", half_life=2.0)
    # ages among the domain's four sessions, failed b included: a is 3 older than d
    weights = {s: w for s, _, _, w in rows}
    assert weights == pytest.approx({"a": 0.5**1.5, "c": 0.5**0.5, "d": 1.0})
    assert half_life_weights(4, 2.0) == pytest.approx([0.5**1.5, 0.5, 0.5**0.5, 1.0])
    count_steps(con, STEPS_QUERY, KINDS)
    habit, reach = weighted_counts(con)
    assert habit[("find",)]["get"] == pytest.approx(weights["a"] + weights["d"])
    assert habit[("find (error)",)] == pytest.approx({"find": weights["c"]})
    assert habit[()]["find"] == pytest.approx(weights["a"] + 2 * weights["c"] + weights["d"])
    # reach: from each step, the reads made at it or later before the next write
    assert reach[("<start>",)]["get"] == pytest.approx(weights["a"] + weights["d"])
    assert habit[("find", "get")] == pytest.approx({"respond": weights["d"]})


def test_rewards_from_a_file_win_over_the_logs(con, tmp_path) -> None:
    path = tmp_path / "rewards.json"
    path.write_text(json.dumps({"b": 1, "c": 0.5}))
    rows = choose_sessions(con, domain="shop", rewards=read_rewards(path))
    assert [s for s, *_ in rows] == ["a", "b", "d"]
    assert [order for _, _, order, _ in rows] == [0, 1, 2]
    assert [s for s, *_ in choose_sessions(con)] == ["a", "x", "c", "d"]
    # a subset, as staging and the gate's folds learn from: ages among the subset
    rows = choose_sessions(con, sessions=["d", "a", "b"], half_life=1.0)
    assert [(s, w) for s, _, _, w in rows] == [("a", 0.25), ("d", 1.0)]
    assert successful(None) and successful(1.0) and not successful(0.99)


def test_bad_rewards_and_half_lives_are_refused(con, tmp_path) -> None:
    path = tmp_path / "rewards.json"
    for text, message in [
        ("[1]", "expected a JSON object"),
        ('{"a": "1"}', 'field `a`: expected a number, got "1"'),
        ('{"a": true}', "field `a`: expected a number, got true"),
        ('{"a": NaN}', "field `a`: expected a finite number"),
        ("{", "not JSON"),
    ]:
        path.write_text(text)
        with pytest.raises(LogError, match=f"rewards.json: {message}"):
            read_rewards(path)
    with pytest.raises(LogError, match="cannot read"):
        read_rewards(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="--half-life wants a number of sessions above 0"):
        choose_sessions(con, half_life=0)
