"""A flow carries its serving threshold: `learn --costs`/`--calibrate` write the break-even
δ/(β+δ) into the flow (`serving`), and replay, flow-show and flow-diff use it unless told
otherwise (the proxy's side: tests/proxy/serve/test_serve.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import learn, stretto

RETAIL_COSTS = "5824,2467"  # τ²-bench retail's input tokens of a saved turn and of a detour
RETAIL_THETA = 0.2976  # 2467 / (5824 + 2467), to 4 places


@pytest.fixture(scope="module")
def costed(hand_made_shop_flow: Path, tmp_path_factory) -> Path:
    """The hand-made shop flow learned again with retail's costs."""
    tmp = tmp_path_factory.mktemp("costed")
    out = tmp / "shop.flow.json"
    done = learn(
        hand_made_shop_flow.parent / "sessions", out, tmp / "home", "--costs", RETAIL_COSTS
    )
    assert done.returncode == 0, done.stderr
    assert f"served at {RETAIL_THETA} unless told otherwise" in done.stdout
    return out


def test_learn_with_costs_writes_the_break_even_into_the_flow(costed: Path) -> None:
    serving = json.loads(costed.read_text())["serving"]
    assert serving == {"threshold": RETAIL_THETA, "costs": {"saved_turn": 5824, "detour": 2467}}


@pytest.mark.parametrize(
    ("costs", "said"),
    [("7", "expected BETA,DELTA"), ("0,3", "BETA must be above 0"), ("7,-1", "DELTA at least 0")],
)
def test_bad_costs_are_refused_before_learning(
    hand_made_shop_flow: Path, costs: str, said: str, tmp_path: Path
) -> None:
    out = tmp_path / "f.flow.json"
    done = learn(hand_made_shop_flow.parent / "sessions", out, tmp_path / "home", "--costs", costs)
    assert done.returncode == 2 and said in done.stderr
    assert not out.exists()


def test_replay_serves_the_flow_at_its_own_threshold_unless_told(
    costed: Path, hand_made_shop_flow: Path
) -> None:
    sessions = hand_made_shop_flow.parent / "sessions"

    def totals(*extra: str) -> dict:
        done = stretto(
            "replay", "--flow", costed, "--sessions", sessions, "--format", "json", *extra
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    own, told, usual = (
        totals(),
        totals("--threshold", str(RETAIL_THETA)),
        totals("--threshold", "0.9"),
    )
    assert own["flow"]["threshold"] == RETAIL_THETA
    assert own["total"] == told["total"] and own["episodes"] == told["episodes"]
    assert usual["flow"]["threshold"] == 0.9 and usual["total"] != own["total"]


def test_flow_show_prints_it_and_flow_diff_asks_for_review_when_it_is_lowered(
    costed: Path, hand_made_shop_flow: Path
) -> None:
    shown = stretto("flow-show", costed)
    assert shown.returncode == 0, shown.stderr
    assert f"**Served at {RETAIL_THETA}** unless told otherwise" in shown.stdout
    assert f"against the threshold, {RETAIL_THETA} unless the site has its own" in shown.stdout
    as_json = json.loads(stretto("flow-show", costed, "--format", "json").stdout)
    assert as_json["threshold"] == RETAIL_THETA and as_json["serving"]["threshold"] == RETAIL_THETA
    lowered = stretto("flow-diff", hand_made_shop_flow, costed)
    assert lowered.returncode == 1
    assert f"a lower serving threshold: 0.3 -> {RETAIL_THETA}" in lowered.stdout
    raised = stretto("flow-diff", costed, hand_made_shop_flow)
    assert f"a higher serving threshold: {RETAIL_THETA} -> 0.3" in raised.stdout
