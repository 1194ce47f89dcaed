"""The surprise gate: an agent that leaves its habit has the flow hand back after the window;
one that keeps to it is served to the end. And the threshold learned by cross-fitting."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from stretto.logs.episode import read_episode
from stretto.logs.merged import read_episodes
from stretto.model.decide import Decider
from stretto.model.flow import validate
from stretto.model.surprise import (
    Gate,
    decision_points,
    gate_from_flow,
    peak_window_mean,
    session_surprises,
    step_surprise,
)
from stretto.offline.fits.gate import GateError, learn_gate
from tests.stretto.offline.lifecycle.lifecycle import (
    Session,
    customer,
    learn_folder,
    learner,
    write_sessions,
)

WINDOW = 5


@pytest.fixture(scope="module")
def flow(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("gate")
    write_sessions(base / "train", ["usual"] * 12, seed=1, customers=2)
    return learn_folder(base / "train", base / "shop.flow.json", base / "home")


def long_session(folder: Path, habits: list[str], name: str) -> Path:
    import random

    session = Session(name, 5_000_000)
    rng = random.Random(7)
    for k, habit in enumerate(habits):
        customer(session, 900 + k, rng, habit)
    return session.write(folder)


def run_gate(flow: dict, path: Path, threshold: float) -> tuple[Gate, list[float]]:
    gate = Gate(threshold, WINDOW)
    surprises = session_surprises(Decider(flow, "habit"), read_episode(path))
    for s in surprises:
        gate.observe(s)
    return gate, surprises


def test_an_agent_that_keeps_its_habit_is_served_to_the_end(flow, tmp_path) -> None:
    path = long_session(tmp_path, ["usual"] * 6, "keeps")
    gate, surprises = run_gate(flow, path, threshold=2.0)
    assert len(surprises) >= 4 * WINDOW
    assert not gate.closed and gate.reason is None
    assert peak_window_mean(surprises, WINDOW) < 2.0


def test_an_agent_that_wanders_off_has_the_flow_hand_back_after_the_window(flow, tmp_path) -> None:
    path = long_session(tmp_path, ["usual"] * 3 + ["changed"] * 3, "wanders")
    gate, surprises = run_gate(flow, path, threshold=2.0)
    usual_steps = len(
        session_surprises(
            Decider(flow, "habit"),
            read_episode(long_session(tmp_path / "u", ["usual"] * 3, "first-half")),
        )
    )
    assert gate.closed
    # not while the agent kept its habit, and within a window or two of its change
    assert usual_steps < gate.closed_at <= usual_steps + 2 * WINDOW
    assert gate.reason.startswith("the agent left its habit: ")
    assert gate.reason.endswith(f"over its last {WINDOW} steps, above 2")
    assert gate.closing_mean > 2.0
    # once closed it stays closed, whatever comes next
    assert gate.observe(0.0) and gate.closed_at < gate.steps


def test_step_surprise_and_the_floor() -> None:
    probs = {"get_order": 0.8, "respond": 0.2}
    assert step_surprise(probs, "get_order") == pytest.approx(-math.log(0.8))
    # a write, another tool, or a reply all count as handing back
    assert step_surprise(probs, "close_order") == pytest.approx(-math.log(0.2))
    assert step_surprise(probs, None) == pytest.approx(-math.log(0.2))
    assert step_surprise({"get_order": 1.0, "respond": 0.0}, None) == pytest.approx(-math.log(1e-6))


def test_the_flows_lookups_are_not_the_agents_steps(tmp_path) -> None:
    from tests.builders import LogBuilder

    b = LogBuilder()
    b.client_call(0, 1, "find_account", email="a@x").result(1, 1, "acct")
    b.proxy_call(2, "stretto-1", "get_account", account="acct").result(3, "stretto-1", "{}")
    b.client_call(1000, 2, "get_order", order="o").result(1001, 2, "{}")
    b.say(1002, "user", "thanks")
    points = list(decision_points(b.episode(tmp_path)))
    # after find_account the flow's lookup came next: not scored; after the lookup, the
    # agent's get_order; after get_order, the user spoke (respond)
    assert [(last[0], step) for _, last, step in points] == [
        ("get_account", "get_order"),
        ("get_order", None),
    ]


def test_the_gate_a_flow_carries_and_its_overrides(flow) -> None:
    assert gate_from_flow(flow) is None  # no `surprise` record: no gate
    assert gate_from_flow(flow, "1.5").threshold == 1.5
    assert gate_from_flow(flow, 1.5).window == 5
    with_gate = {**flow, "surprise": {"window": 4, "threshold": 3.0, "quantile": 0.9}}
    validate(with_gate)
    assert gate_from_flow(with_gate).threshold == 3.0
    assert gate_from_flow(with_gate, "2").window == 4
    assert gate_from_flow(with_gate, "off") is None
    with pytest.raises(ValueError, match="`off` or a number"):
        gate_from_flow(with_gate, "high")
    with pytest.raises(ValueError, match="at least 1 step"):
        Gate(1.0, 0)


def test_a_bad_surprise_record_is_refused_by_field(flow) -> None:
    from stretto.model.flow import FlowError

    for bad, field in [
        ({"window": 0, "threshold": 1.0}, "surprise.window"),
        ({"window": 5, "threshold": -1}, "surprise.threshold"),
        ({"window": 5}, "surprise"),
        ({"window": 5, "threshold": 1.0, "quantile": 1.5}, "surprise.quantile"),
    ]:
        with pytest.raises(FlowError, match=f"field `{field}`"):
            validate({**flow, "surprise": bad})


@pytest.mark.slow  # statistical: cross-fitting over many folds
def test_the_threshold_is_learned_by_cross_fitting(tmp_path) -> None:
    write_sessions(tmp_path / "sessions", ["usual"] * 15, seed=3, customers=2)
    episodes = read_episodes(tmp_path / "sessions")
    learn = learner(tmp_path / "learn")
    gate = learn_gate(episodes, learn, quantile=0.9, window=WINDOW)
    assert learn.calls[0] == 5  # one flow per fold, each from the other folds
    assert gate["window"] == WINDOW and gate["quantile"] == 0.9
    assert gate["sessions"] == 15  # every session held out once, each long enough
    # the threshold is one of the held-out peaks, at rank ceil(0.9 · 15) = 14 of 15
    assert 0 < gate["threshold"] < -math.log(1e-6)
    validate({**learn(episodes), "surprise": gate})
    with pytest.raises(GateError, match="no successful held-out session has 500 or more steps"):
        learn_gate(episodes, learn, quantile=0.9, window=500)
