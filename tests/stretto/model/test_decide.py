"""The decision after each call, held to the reference proxy's own decisions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from stretto.logs.episode import Assistant, ToolResult, User, read_episode
from stretto.logs.steps import episode_steps
from stretto.model.binding import SessionState
from stretto.model.decide import Decider, theta_text
from stretto.model.flow import load_flow
from tests.conftest import REFERENCE_HOME

STRETTO = str(Path(sys.executable).parent / "stretto")
SERVED = REFERENCE_HOME / "served/shop"


@pytest.fixture
def shop_flow(shop_flow_path: Path) -> dict:
    flow = load_flow(shop_flow_path)
    # the same counts as the reference's flow; take its α so that probabilities match exactly
    reference = json.loads((REFERENCE_HOME / "shop.flow.json").read_text())
    flow["habit"]["alpha"] = flow["reach"]["alpha"] = reference["habit"]["base"]["alpha"]
    return flow


def replay(flow: dict, session: Path) -> list:
    """Re-decide, at each of the reference proxy's decisions in a served session."""
    episode = read_episode(session)
    steps = {s.call_id: s for s in episode_steps(episode)}
    decider = Decider(flow)
    state = SessionState()
    history: list[str] = []
    decisions = []
    for event in episode.events:
        if isinstance(event, User):
            state.add_user(event.text)
        elif isinstance(event, Assistant):
            for call in event.calls:
                state.add_call(call.name, call.arguments)
                history.append(steps[call.id].name())
            if not event.calls:
                history.append("respond")
        elif isinstance(event, ToolResult):
            state.add_result(event.name, not event.error, event.content)
            decisions.append(
                (event, decider.decide(list(history), (event.name, event.error), state))
            )
    return decisions


def test_reach_decisions_match_the_reference_proxy(shop_flow: dict) -> None:
    session = SERVED / "20260928T020401.117Z-14662.jsonl"
    flow_log = SERVED / "20260928T020401.117Z-14662.flow.jsonl"
    logged = [json.loads(line) for line in flow_log.read_text().splitlines()]
    logged = [d for d in logged if "action" in d]
    ours = [d for _, d in replay(shop_flow, session)]
    assert len(ours) == len(logged) == 5  # four in the first run, one after the write
    for mine, theirs in zip(ours, logged, strict=True):
        assert mine.site == theirs["site"]
        assert mine.action == theirs["action"]
        assert mine.probs == pytest.approx(theirs["probs"], abs=1e-12)
        assert mine.prob == pytest.approx(theirs["prob"], abs=1e-12)
        if theirs["action"] == "lookup":
            assert (mine.tool, mine.arguments) == (theirs["tool"], theirs["arguments"])
            assert mine.binding == pytest.approx(theirs["binding"], abs=1e-12)
        else:
            assert mine.reason == theirs["reason"]


def test_hand_back_reasons(shop_flow: dict) -> None:
    decider = Decider(shop_flow)
    state = SessionState()
    assert decider.decide([], None, state).reason == "the last step is not a tool call"
    lonely = decider.decide(["cancel_pending_order"], ("cancel_pending_order", False), state)
    assert (lonely.site, lonely.reason) == (
        "cancel_pending_order",
        "no lookups followed here in training",
    )
    # the site's lookup cannot bind: nothing found yet to pass
    nothing = decider.decide(["get_user_details"], ("get_user_details", False), state)
    assert nothing.reason == "get_order_details: nothing left to pass as `order_id`"
    off = Decider({**shop_flow, "thresholds": {"find_user_id_by_email": 2.0}})
    assert (
        off.decide(["find_user_id_by_email"], ("find_user_id_by_email", False), state).reason
        == "the site is switched off"
    )
    habit = Decider(shop_flow, "habit", threshold=0.999)
    state.add_result("find_user_id_by_email", True, "user_9")
    low = habit.decide(["find_user_id_by_email"], ("find_user_id_by_email", False), state)
    assert low.reason == "get_user_details at 1.00, times 0.88 for its arguments, below 0.999"
    assert theta_text(0.3) == "0.3" and theta_text(1.0) == "1"


def test_exploration_draws_and_propensities() -> None:
    from stretto.model.decide import Decision, Option, SplitMix64, explore

    options = [
        Option("a", 0.9, 0.9, 1.0, {"k": "1"}),
        Option("b", 0.6, 0.6, 1.0, {"k": "2"}),
        Option("c", 0.2, 0.2, 1.0, {"k": "3"}),
        Option("d", 0.5, 0.5, None, None, "no"),
    ]
    greedy = Decision(
        "s", "lookup", tool="a", arguments={"k": "1"}, prob=0.9, binding=1.0, options=options
    )
    taken = {"a": 0, "b": 0, "c": 0}
    for seed in range(4000):
        decision, record = explore(greedy, 0.5, SplitMix64(seed))
        taken[decision.tool] += 1
        expected = {"a": 0.5, "b": 0.5 * 0.6 / 0.8, "c": 0.5 * 0.2 / 0.8}[decision.tool]
        assert record["propensity"] == pytest.approx(expected)
        assert record["explored"] == (decision.tool != "a")
    assert taken["a"] / 4000 == pytest.approx(0.5, abs=0.03)
    assert taken["b"] / 4000 == pytest.approx(0.375, abs=0.03)
    assert taken["c"] / 4000 == pytest.approx(0.125, abs=0.03)
    # the same seed draws the same way
    assert (
        explore(greedy, 0.5, SplitMix64(7))[0].tool == explore(greedy, 0.5, SplitMix64(7))[0].tool
    )
