"""flow-show and flow-diff on learned and hand-edited flows."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from stretto.offline.lifecycle.flowdiff import diff
from tests.builders import stretto


@pytest.fixture
def shop(shop_flow_path: Path) -> Path:
    return shop_flow_path


def test_flow_show(shop: Path) -> None:
    done = stretto("flow-show", shop)
    assert done.returncode == 0
    text = done.stdout
    assert "- **Never calls** (writes): cancel_pending_order" in text
    assert (
        "| get_user_details | 6 | 0.99 | 0.88 | looks up get_user_details: 0.99 × 0.88 = 0.87 |"
        in text
    )
    assert "- `order_id` from get_user_details `$.orders[*]` (12 of 12)" in text
    assert "Decide(prev, failed)" in text
    data = json.loads(stretto("flow-show", shop, "--format", "json").stdout)
    assert data["writes"] == ["cancel_pending_order"] and data["program"] == "standard"
    strict = stretto("flow-show", shop, "--threshold", "0.9").stdout
    assert "hands back: 0.99 × 0.88 = 0.87, below 0.9" in strict


def changed(flow: dict, edit) -> dict:
    new = copy.deepcopy(flow)
    edit(new)
    return new


def test_flow_diff_lists_what_needs_review(shop: Path, tmp_path: Path) -> None:
    flow = json.loads(shop.read_text())
    cases = {
        "a new lookup after find_user_id_by_email: get_order_details": lambda f: f["sites"]["next"][
            0
        ]["lookups"].update(get_order_details=1),
        "a new tool it may call: list_orders": lambda f: f["sites"]["reads"].append("list_orders"),
        "a new source for get_order_details.order_id: find_user_id_by_email `$`": lambda f: f[
            "bindings"
        ]["sources"][1]["found"].append(
            {"source": "find_user_id_by_email", "path": "$", "count": 2}
        ),
        "a new constant: get_order_details.order_id = 'x'": lambda f: f["bindings"].update(
            constants=[{"tool": "get_order_details", "arg": "order_id", "value": "x"}]
        ),
        "the program changed: it is code the proxy runs": lambda f: f["program"]["body"].pop(),
    }
    for expected, edit in cases.items():
        review, _ = diff(flow, changed(flow, edit))
        assert expected in review, (expected, review)
    # thresholds: switched on, lowered; raised needs no review
    old = changed(flow, lambda f: f.update(thresholds={"a": 2.0, "b": 0.5, "c": 0.5}))
    new = changed(flow, lambda f: f.update(thresholds={"a": 0.4, "b": 0.4, "c": 0.6}))
    review, other = diff(old, new)
    assert review == ["a site switched on: a", "a lower threshold at b: 0.5 -> 0.4"]
    assert "a higher threshold at c: 0.5 -> 0.6" in other
    # a site without a threshold of its own is served at the default 0.3
    review, other = diff(flow, changed(flow, lambda f: f.update(thresholds={"d": 0.3, "e": 2.0})))
    assert review == [] and "a site switched off: e" in other
    # counts and probabilities only
    recount = changed(
        flow,
        lambda f: (
            f["sites"]["next"][0]["lookups"].update(get_user_details=9),
            f["habit"].update(alpha=1.5),
        ),
    )
    review, other = diff(flow, recount)
    assert review == []
    assert "after find_user_id_by_email: get_user_details seen 6 -> 9 times" in other

    new_path = tmp_path / "new.flow.json"
    new_path.write_text(json.dumps(changed(flow, cases[next(iter(cases))])))
    done = stretto("flow-diff", shop, new_path)
    assert done.returncode == 1 and "## Needs review" in done.stdout
    same = stretto("flow-diff", shop, shop)
    assert same.returncode == 0
    broken = stretto("flow-diff", shop, tmp_path / "missing.json")
    assert broken.returncode == 2 and "cannot read" in broken.stderr


def test_flow_diff_lists_a_changed_surprise_gate(shop: Path) -> None:
    """Removing the gate, raising its threshold or widening its window lets the flow act
    where it handed back: review. Adding or tightening it only hands back sooner."""
    flow = json.loads(shop.read_text())
    gate = {"window": 5, "threshold": 2.0, "quantile": 0.9, "sessions": 40}
    gated = changed(flow, lambda f: f.update(surprise=gate))

    def with_gate(**values) -> dict:
        return changed(flow, lambda f: f.update(surprise={**gate, **values}))

    review, other = diff(gated, flow)
    assert review == [
        "the surprise gate was removed (it handed back above 2 nats per step over 5 steps): "
        "the flow keeps acting after the agent leaves its habit"
    ]
    review, other = diff(gated, with_gate(threshold=2.5))
    assert review == [
        "the surprise gate may trip later: above 2 nats per step over 5 steps -> above 2.5 "
        "nats per step over 5 steps"
    ]
    review, _ = diff(gated, with_gate(window=8))
    assert len(review) == 1 and "may trip later" in review[0]
    for old, new, said in [
        (flow, gated, "a surprise gate was added: it hands back above 2 nats per step"),
        (gated, with_gate(threshold=1.5), "the surprise gate trips sooner"),
        (gated, with_gate(sessions=50), "the surprise gate learned again from 40 -> 50"),
    ]:
        review, other = diff(old, new)
        assert review == [] and any(said in o for o in other), other
    assert diff(gated, with_gate()) == ([], [])
