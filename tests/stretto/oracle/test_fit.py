"""The arbiter's fit (conditional logit, ridge 1, Newton with step halving), its rates, the
learn split and folds, and its part of the flow."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from stretto.model.flow import FlowError, validate
from stretto.oracle.arbiter import ArbiterError, arbiter_from_json, new_arbiter
from stretto.oracle.fit import fit_fold, fit_folds, fit_logit
from stretto.oracle.questions import Predicate
from stretto.oracle.request import yes_no
from stretto.oracle.scores import Case, Rates, design, features, make_case
from stretto.oracle.split import learn_split
from stretto.vocabulary import RESPOND, fold_of
from tests.builders import small_flow, synthetic_cases

TRUE_WEIGHTS = np.array([1.0, 0.5, -0.8, 0.3, 1.2])


def synthetic_logit(seed: int, cases: int = 3000):
    rng = np.random.default_rng(seed)
    designs, chosen = [], []
    for _ in range(cases):
        x = rng.normal(size=(int(rng.integers(2, 6)), len(TRUE_WEIGHTS)))
        s = x @ TRUE_WEIGHTS
        p = np.exp(s - s.max())
        designs.append(x)
        chosen.append(int(rng.choice(len(x), p=p / p.sum())))
    return designs, chosen


def test_the_fit_recovers_known_weights() -> None:
    designs, chosen = synthetic_logit(7)
    fit = fit_logit(designs, chosen)
    assert fit.stopped == "converged" and fit.iterations < 20
    assert np.abs(fit.weights - TRUE_WEIGHTS).max() < 0.1
    # at the optimum the penalized gradient is zero
    grad = (
        sum(
            x[y] - np.exp(x @ fit.weights) @ x / np.exp(x @ fit.weights).sum()
            for x, y in zip(designs, chosen, strict=True)
        )
        - fit.weights
    )
    assert np.abs(grad).max() < 1e-6


def test_the_ridge_pulls_towards_zero() -> None:
    designs, chosen = synthetic_logit(3, cases=40)
    loose = fit_logit(designs, chosen, ridge=1e-6).weights
    tight = fit_logit(designs, chosen, ridge=1.0).weights
    assert np.linalg.norm(tight) < np.linalg.norm(loose)


def test_the_fit_is_deterministic() -> None:
    designs, chosen = synthetic_logit(11, cases=500)
    a = fit_logit(designs, chosen).weights.tolist()
    b = fit_logit(designs, chosen).weights.tolist()
    assert json.dumps(a) == json.dumps(b)


def test_the_fit_on_cases_weighs_the_answer_that_predicts() -> None:
    fold = fit_fold(synthetic_cases(5), [])
    ln_habit, ln_one, ln_split, hand_back, reliability = fold.weights
    assert ln_one == pytest.approx(1.0, abs=0.15)
    assert max(abs(ln_habit), abs(ln_split), abs(hand_back)) < 0.2
    assert fold.cases == 1500 and fold.rates.cover == 1.0


def test_rates_reliability_and_coverage() -> None:
    def case(site, pick, actual):
        return Case(site, "p", ["a", RESPOND], {}, {}, {}, {}, pick, actual)

    cases = [
        case("s", "a", "a"),
        case("s", "a", RESPOND),
        case("s", "a", None),
        case("t", "a", "a"),
    ]
    rates = Rates.of(cases)
    assert rates.sites == {"s": (3, 1, 2), "t": (1, 1, 1)}
    assert (rates.agree, rates.cover) == (0.5, 0.75)
    assert rates.reliability("s") == pytest.approx((1 + 10 * 0.5) / 13)
    assert rates.coverage("t") == pytest.approx((1 + 10 * 0.75) / 11)
    assert rates.coverage("never seen") == 0.75
    assert (Rates.of([]).agree, Rates.of([]).cover) == (0.5, 1.0)
    assert Rates.from_json(rates.to_json()) == rates


def test_case_features_and_design() -> None:
    same = Predicate("list_pending", "same_lookup", "?", "y", "n")
    hand = Predicate("must_ask", "hand_back", "?", "y", "n")
    case = make_case(
        site="get_user",
        prev="get_user",
        lookups=["get_user", "get_order"],
        habit={"get_user": 0.5, "get_order": 0.0},
        answers={
            "next": {"get_order": 0.2, "get_user": 0.7, RESPOND: 0.1},
            "go_on": yes_no(0.9),
            "tool": {"get_order": 0.25, "get_user": 0.75},
            "pred_list_pending": yes_no(1.0),
            "pred_must_ask": yes_no(0.2),
        },
        predicates=[same, hand],
    )
    assert case.options == ["get_order", "get_user", RESPOND] and case.pick == "get_user"
    assert case.split == pytest.approx({"get_order": 0.225, "get_user": 0.675, RESPOND: 0.1})
    rows = features(case, [same, hand])
    assert rows[0][:4] == pytest.approx([math.log(1e-6), math.log(0.2), math.log(0.225), 0])
    assert rows[2][3] == 1.0 and rows[2][0] == pytest.approx(math.log(0.5))
    assert rows[1][4] == pytest.approx(math.log((1 - 1e-4) / 1e-4))  # clamped, favours same
    assert rows[0][4] == 0 and rows[2][5] == pytest.approx(math.log(0.2 / 0.8))
    full = design(case, [same, hand], Rates())
    assert [row[-1] for row in full] == [0.0, 0.0, 0.0]  # logit(reliability 0.5) on the pick
    assert len(full[0]) == 4 + 2 + 1


def test_the_learn_split() -> None:
    tasks = [f"t{i}" for i in range(10)]
    train, held = learn_split(tasks)
    assert len(held) == 3 and sorted(train + held) == sorted(tasks)
    assert train == [t for t in tasks if t in train]  # original order kept
    assert learn_split(list(reversed(tasks)))[1] == list(reversed(held))
    assert [len(side) for side in learn_split(["a", "b"])] == [1, 1]
    assert len(learn_split([f"t{i}" for i in range(6)])[1]) == 2  # round(1.8)
    with pytest.raises(ValueError, match="at least 2 tasks"):
        learn_split(["only", "only"])


def test_cross_fitted_folds_leave_each_group_out() -> None:
    cases = synthetic_cases(9, n=600)
    folds = fit_folds(cases, [], pooled=False)
    assert len(folds) == 5
    for k, fold in enumerate(folds):
        assert fold.cases == sum(1 for c in cases if fold_of(c.task) != k)
    assert len({json.dumps(f.weights) for f in folds}) == 5
    [pooled] = fit_folds(cases, [])
    assert pooled.cases == 600


def test_the_arbiter_part_of_the_flow() -> None:
    predicate = Predicate("list_pending", "same_lookup", "More?", "y", "n")
    cases = synthetic_cases(4, n=300)
    arbiter = new_arbiter(
        model="simulate://habit",
        folds=fit_folds(cases, []),
        predicates=[predicate],
        weighed=[],
        tasks=9,
    )
    flow = small_flow()
    flow["arbiter"] = arbiter.to_json()
    validate(flow, "shop.flow.json")
    back = arbiter_from_json(json.loads(json.dumps(flow["arbiter"])), "shop.flow.json")
    assert back.to_json() == flow["arbiter"]
    probs = back.judge(cases[0], cases[0].task)
    assert sum(probs.values()) == pytest.approx(back.folds[0].rates.coverage(cases[0].site))
    assert flow["arbiter"]["features"] == [
        "ln habit",
        "ln one question",
        "ln split",
        "hand back",
        "reliability",
    ]

    bad = json.loads(json.dumps(flow))
    bad["arbiter"]["folds"] = bad["arbiter"]["folds"] * 3
    with pytest.raises(FlowError, match="shop.flow.json: field `arbiter.folds`"):
        validate(bad, "shop.flow.json")
    bad["arbiter"]["folds"] = flow["arbiter"]["folds"]
    bad["arbiter"]["weighed"] = ["must_ask"]
    with pytest.raises(
        ArbiterError, match=r"field `arbiter.weighed\[0\]`: no predicate `must_ask`"
    ):
        arbiter_from_json(bad["arbiter"], "shop.flow.json")
    bad["arbiter"]["weighed"] = ["list_pending"]
    bad["arbiter"]["features"] = [
        *bad["arbiter"]["features"][:4],
        "pred_list_pending",
        "reliability",
    ]
    with pytest.raises(
        ArbiterError, match=r"field `arbiter.folds\[0\].weights`: expected 6 numbers"
    ):
        arbiter_from_json(bad["arbiter"], "shop.flow.json")
