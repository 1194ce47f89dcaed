"""The flow's program: the standard run after each call, and its three handlers."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

from stretto.model.flow import load_flow
from stretto.model.program import (
    STANDARD_PROGRAM,
    Execute,
    FlowDistributions,
    Score,
    Simulate,
    run,
)
from tests.conftest import REFERENCE_HOME

STRETTO = str(Path(sys.executable).parent / "stretto")


@pytest.fixture
def shop_flow(shop_flow_path: Path) -> dict:
    return load_flow(shop_flow_path)


def reference_run() -> dict:
    log = REFERENCE_HOME / "served/shop/20260928T020401.117Z-14662.flow.jsonl"
    return next(
        json.loads(line)["run"]
        for line in log.read_text().splitlines()
        if "run" in json.loads(line)
    )


def test_execute_reproduces_the_reference_proxy_run(shop_flow: dict) -> None:
    recorded = reference_run()
    decisions = {a: v for a, v, _ in recorded["sites"] if a.startswith("decide")}
    outcomes = {a: v for a, v, _ in recorded["sites"] if a.startswith("outcome")}
    dists = FlowDistributions(shop_flow)
    handler = Execute(
        lambda address, prev, failed: decisions[address], lambda address, tool: outcomes[address]
    )
    result, trace = run(
        STANDARD_PROGRAM,
        dists,
        handler,
        call=recorded["call"],
        call_failed=recorded["failed"],
        max_lookups=recorded["max_lookups"],
    )
    assert [(a, v) for a, v, _ in trace] == [(a, v) for a, v, _ in recorded["sites"]]
    for (_, _, ours), (_, _, theirs) in zip(trace, recorded["sites"], strict=True):
        assert ours == pytest.approx(theirs, abs=1e-12)
    assert -sum(lp for _, _, lp in trace) == pytest.approx(recorded["surprise"], abs=1e-12)
    assert result == 2  # the last lookup made: get_order_details


def test_decide_and_outcome(shop_flow: dict) -> None:
    dists = FlowDistributions(shop_flow)
    assert dists.tools[:4] == [
        "respond",
        "find_user_id_by_email",
        "get_order_details",
        "get_user_details",
    ]
    # after get_user_details: 6 calls, all followed by get_order_details -> counts [0, 6]
    probs = dists.decide(dists.tool_id("get_user_details"), False)
    assert probs == {0: 1 / 8, 2: 7 / 8}
    assert dists.outcome(dists.tool_id("get_order_details")) == 13 / 14
    assert dists.decide(dists.tool_id("cancel_pending_order"), False) == {0: 1.0}


def test_score_and_simulate(shop_flow: dict) -> None:
    dists = FlowDistributions(shop_flow)
    call = "find_user_id_by_email"
    trace = {"decide#0": 3, "outcome#0": True, "decide#1": 0}
    _, scored = run(STANDARD_PROGRAM, dists, Score(trace), call=call, call_failed=False)
    expected = math.log(7 / 8) + math.log(7 / 8) + math.log(1 / 8)
    assert sum(lp for _, _, lp in scored) == pytest.approx(expected)
    first = run(STANDARD_PROGRAM, dists, Simulate(random.Random(3)), call=call, call_failed=False)
    again = run(STANDARD_PROGRAM, dists, Simulate(random.Random(3)), call=call, call_failed=False)
    assert first == again  # seeded draws are reproducible
    assert all(v in (0, 2, 3) for a, v, _ in first[1] if a.startswith("decide"))
