"""stretto audit: next-step scores and the served score's calibration."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stretto.logs.merged import read_episodes
from stretto.model.flow import habit_model, load_flow
from stretto.offline.reports.audit import audit
from tests.builders import stretto
from tests.conftest import REFERENCE_HOME


@pytest.fixture
def shop(shop_flow_path: Path) -> Path:
    return shop_flow_path


def test_a_decision_scored_by_hand(shop: Path) -> None:
    flow = load_flow(shop)
    episodes = read_episodes(REFERENCE_HOME / "shadow/shop")
    result = audit(flow, episodes)
    first = result.decisions[0]
    # after find_user_id_by_email the options are get_user_details and respond, plus other
    habit = habit_model(flow)
    p = habit.prob("get_user_details", ["find_user_id_by_email"])
    probs = {"get_user_details": p, "respond": max(0.0, 1 - p), "other": 0.0}
    floored = {k: max(v, 1e-6) for k, v in probs.items()}
    expected = math.log(floored["get_user_details"] / sum(floored.values()))
    assert (first["site"], first["actual"], first["hit"]) == (
        "find_user_id_by_email",
        "get_user_details",
        True,
    )
    assert first["log_prob"] == pytest.approx(expected, rel=1e-12)
    totals = result.totals()
    assert totals["decisions"] == len(result.decisions) == 12
    # the Score handler's log-probability (the program run on the agent's step) is the
    # floored, renormalized probability of that step; the totals are those of the audit
    # before it ran the program (pinned from that version)
    for d in result.decisions:
        assert d["log_prob"] == pytest.approx(math.log(d["p_actual"]), rel=1e-12)
    assert totals["log_prob"] == pytest.approx(-0.046701380342083175, rel=1e-12)
    assert totals["ece"] == pytest.approx(0.11098991878449208, rel=1e-12)
    assert totals["nats_per_decision"] == pytest.approx(
        -sum(d["log_prob"] for d in result.decisions) / 12
    )


def test_the_command_writes_markdown_tables_and_a_plot(shop: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = stretto(
        "audit", "--flow", shop, "--sessions", REFERENCE_HOME / "shadow/shop", "--out", out
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# Audit (habit decider)\n\n3 episodes, 12 decisions scored.")
    assert "| get_order_details | 6 |" in done.stdout
    assert pq.read_table(out / "sites.parquet").num_rows == 3
    assert pq.read_table(out / "decisions.parquet").num_rows == 12
    assert (out / "reliability.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    missing = stretto("audit", "--flow", shop, "--sessions", tmp_path / "nope")
    assert missing.returncode == 1 and "not a directory of session logs" in missing.stderr


def test_nothing_served_is_none_and_the_tables_keep_their_columns(shop: Path, tmp_path) -> None:
    from stretto.offline.reports.audit import markdown, write_tables

    result = audit(load_flow(shop), [])
    totals = result.totals()
    assert (totals["served"], totals["ece"], totals["brier"], totals["auc"]) == (
        0,
        None,
        None,
        None,
    )
    assert "ECE n/a, Brier n/a, AUC n/a" in markdown(result)
    write_tables(result, tmp_path)
    calibration = pq.read_table(tmp_path / "calibration.parquet")
    assert calibration.num_rows == 0
    assert calibration.column_names == ["from", "to", "count", "mean_score", "used"]
    assert pq.read_table(tmp_path / "decisions.parquet").column_names[:3] == [
        "episode",
        "site",
        "actual",
    ]
    assert pq.read_table(tmp_path / "totals.parquet").to_pylist()[0]["ece"] is None
