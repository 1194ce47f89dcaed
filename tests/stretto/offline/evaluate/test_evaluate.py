"""stretto evaluate: labels from session logs, off-policy estimates held to a known truth, the
command over a real proxy's exploring logs, and the `evaluation` asset."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from stretto.model.decide import Decider, Option, SplitMix64, explore
from stretto.offline.evaluate import (
    EvaluateError,
    Labelled,
    Target,
    estimate_rows,
    evaluate,
    label_folder,
    labelled_row,
    logging_propensities,
    target_action,
    values,
    write_tables,
)
from stretto.stdio_client import StdioClient, result_text
from tests.builders import stretto
from tests.conftest import (
    REFERENCE_HOME,
    notes_flow,
    searches_then_reads,
    served_notes,
)

METRICS = ("lookups", "used", "detours", "turns")


# --- the logging policy's propensities ----------------------------------------------------


def _options(rng: np.random.Generator, tools: list[str]) -> list[Option]:
    out = []
    for tool in tools:
        bound = rng.random() < 0.85
        out.append(
            Option(
                tool,
                float(rng.choice([0.0, rng.uniform()])) if rng.random() < 0.1 else rng.uniform(),
                float(rng.uniform()),
                float(rng.uniform(0.4, 1.0)) if bound else None,
                {"k": tool} if bound else None,
                None if bound else f"{tool}: no source",
            )
        )
    return out


def _view(options: list[Option]) -> list[dict]:
    return [
        {"tool": o.tool, "p": o.prob, "arguments": o.arguments, "binding": o.chance}
        for o in options
    ]


def test_the_logging_propensities_are_those_explore_draws_with() -> None:
    rng = np.random.default_rng(3)
    for case in range(300):
        options = _options(rng, ["a", "b", "c", "d"][: 1 + case % 4])
        epsilon = [0.0, 0.1, 0.5, 1.0][case % 4]
        decision = Decider.reach_rule(options, 0.3)
        decision.options = options
        greedy = decision.tool if decision.action == "lookup" else None
        props, hand_back = logging_propensities(_view(options), greedy, epsilon)
        assert sum(props) + hand_back == pytest.approx(1.0)
        seen: dict[str | None, int] = {}
        for seed in range(40):
            taken, record = explore(decision, epsilon, SplitMix64(seed * 7919 + case))
            tool = taken.tool if taken.action == "lookup" else None
            seen[tool] = seen.get(tool, 0) + 1
            expected = hand_back if tool is None else props[[o.tool for o in options].index(tool)]
            assert record["propensity"] == pytest.approx(expected, abs=1e-12)
        # nothing is ever taken that the propensities say cannot be
        for tool in seen:
            assert (hand_back if tool is None else props[[o.tool for o in options].index(tool)]) > 0


def test_the_greedy_choice_is_recovered_from_an_explored_decision() -> None:
    rng = np.random.default_rng(5)
    checked = 0
    for case in range(400):
        options = _options(rng, ["a", "b", "c"])
        decision = Decider.reach_rule(options, 0.3)
        decision.options, decision.site = options, "s"
        greedy = decision.tool if decision.action == "lookup" else None
        taken, record = explore(decision, 0.6, SplitMix64(case))
        assert record["greedy"] == greedy  # logged by the proxy since greedy was added
        record.pop("greedy")  # as in a flow log written before: it must be inferred
        entry = {
            "address": "decide#0",
            "site": "s",
            "action": taken.action,
            "tool": taken.tool,
            "explore": record,
        }
        none = {"used": False, "detour": False, "turn": 0.0, "next": False}
        row = labelled_row(entry, [none] * len(options))
        if record["explored"]:
            checked += 1
            assert row["greedy_inferred"]
            if greedy is None:
                assert row["greedy"] is None
            else:  # the same choice, or one of equal probability
                chosen = [o.prob for o in options if o.tool == row["greedy"]]
                assert chosen == [decision.prob]
    assert checked > 50


def test_the_targets_use_the_decide_rules() -> None:
    def row(*options) -> dict:
        return {
            "options": [
                {
                    "tool": tool,
                    "p": p,
                    "habit": habit,
                    "binding": binding,
                    "arguments": None if binding is None else {"k": tool},
                    "unbound": None if binding is None else "no",
                }
                for tool, p, habit, binding in options
            ]
        }

    r = row(("a", 0.9, 0.2, 0.5), ("b", 0.6, 0.5, 1.0), ("c", 0.95, 0.3, None))
    # reach: best p × binding among those that clear θ and bind: b (0.6) over a (0.45)
    assert target_action(r, Target("reach", 0.3)) == 1
    assert target_action(r, Target("reach", 0.7)) is None  # a clears 0.7 alone, times 0.5 not
    # habit: the likeliest by the habit, b; at 0.55 b is below θ, and there is no fall-back
    assert target_action(r, Target("habit", 0.3)) == 1
    assert target_action(r, Target("habit", 0.55)) is None
    # the likeliest habit option that does not bind: hand back (no fall-back)
    r = row(("a", 0.9, 0.2, 0.5), ("c", 0.95, 0.7, None))
    assert target_action(r, Target("habit", 0.1)) is None
    assert values({"used": True, "detour": False, "turn": 0.5}) == (1.0, 1.0, 0.0, 0.5)


# --- estimates held to a known truth --------------------------------------------------------

TOOLS = {"a": ["x", "y", "z"], "b": ["w", "x"]}
USE = {("a", "x"): 0.7, ("a", "y"): 0.3, ("a", "z"): 0.5, ("b", "w"): 0.8, ("b", "x"): 0.2}
TURN_CALLS = {"x": 1, "y": 2, "z": 3, "w": 2}
LOGGING_THETA = 0.3
MEAN_SESSION = 0.75  # sessions' propensity to use lookups: uniform on [0.5, 1]
MEAN_TURN = (1 + 1 / 2 + 1 / 3) / 3  # one over a turn of 1, 2 or 3 calls


def _context(rng: np.random.Generator) -> tuple[str, list[Option]]:
    site = "a" if rng.random() < 0.6 else "b"
    options = []
    for tool in TOOLS[site]:
        bound = rng.random() < 0.9
        options.append(
            Option(
                tool,
                float(rng.uniform()),
                float(rng.uniform()),
                float(rng.uniform(0.5, 1.0)) if bound else None,
                {"k": tool} if bound else None,
                None if bound else f"{tool}: no source",
            )
        )
    return site, options


def _use(world: str, site: str, option: Option) -> float:
    """The chance the agent makes this lookup itself: its own probability (the model's
    probability is calibrated, and varies from decision to decision), or one per site and
    tool (a world the direct method's model describes exactly)."""
    return option.prob if world == "context" else USE[(site, option.tool)]


def simulate(
    rng: np.random.Generator, world: str, sessions: int = 30, per_session: int = 12
) -> Labelled:
    """Sessions served by the reach rule at 0.3 exploring at ε = 0.3, with every option's
    label drawn from the world. `exact`: labels follow from site and tool alone."""
    rows = []
    for s in range(sessions):
        session_use = 1.0 if world == "exact" else float(rng.uniform(0.5, 1.0))
        for d in range(per_session):
            site, options = _context(rng)
            decision = Decider.reach_rule(options, LOGGING_THETA)
            decision.site, decision.options = site, options
            taken, record = explore(decision, 0.3, SplitMix64(int(rng.integers(1 << 62))))
            labels = []
            for o in options:
                if o.arguments is None:
                    labels.append({"used": False, "detour": False, "turn": 0.0, "next": False})
                    continue
                if world == "exact":
                    used, calls = USE[(site, o.tool)] >= 0.5, TURN_CALLS[o.tool]
                else:
                    used = bool(rng.random() < _use(world, site, o) * session_use)
                    calls = int(rng.integers(1, 4))
                labels.append(
                    {"used": used, "detour": not used, "turn": used / calls, "next": False}
                )
            entry = {
                "address": "decide#0",
                "after": d,
                "site": site,
                "action": taken.action,
                "tool": taken.tool,
                "arguments": taken.arguments,
                "explore": record,
            }
            row = labelled_row(entry, labels, f"session {s}, decision {d}")
            row.update(session=f"s{s}", file="simulated", line=d)
            rows.append(row)
    return Labelled("simulated", sessions, rows, "sim", "reach")


def truth_per_decision(world: str, target: Target, n: int = 100_000) -> np.ndarray:
    """The target's expected values at one decision, over the worlds' contexts (a large
    simulation of contexts; each context's expectation is exact)."""
    rng = np.random.default_rng(12345)
    total = np.zeros(4)
    for _ in range(n):
        site, options = _context(rng)
        row = {
            "options": [
                {
                    "tool": o.tool,
                    "p": o.prob,
                    "habit": o.habit,
                    "binding": o.chance,
                    "arguments": o.arguments,
                    "unbound": o.reason,
                }
                for o in options
            ]
        }
        act = target_action(row, target)
        if act is not None:
            q = _use(world, site, options[act]) * MEAN_SESSION
            total += (1.0, q, 1.0 - q, q * MEAN_TURN)
    return total / n


def coverage(
    world: str, target: Target, replications: int, bootstrap: int, min_ess: float = 10.0
) -> dict:
    sessions, per_session = 30, 12
    truth = truth_per_decision(world, target) * sessions * per_session
    names = ("labelled", "direct", "ips", "snips", "dr", "sndr", "switch_dr")
    hits = {(n, k, m): 0 for n in names for k in ("analytic", "bootstrap") for m in METRICS[1:]}
    errors = {(n, m): [] for n in names for m in METRICS[1:]}
    rng = np.random.default_rng(2026)
    for r in range(replications):
        (result,) = evaluate(
            simulate(rng, world, sessions, per_session),
            [target],
            bootstrap=bootstrap,
            seed=r,
            min_ess=min_ess,
        )
        total = result["total"]
        assert not total["refused"], total["refusal"]
        for n in names:
            for j, m in enumerate(METRICS[1:], start=1):
                errors[(n, m)].append(total[n][m] - truth[j])
                for kind in ("analytic", "bootstrap"):
                    bounds = total["intervals"][n][kind]
                    if bounds is not None:
                        hits[(n, kind, m)] += bounds[m][0] <= truth[j] <= bounds[m][1]
    return {
        "truth": truth,
        "coverage": {key: count / replications for key, count in hits.items()},
        "bias": {key: float(np.mean(e)) for key, e in errors.items()},
        "bias_se": {key: float(np.std(e) / math.sqrt(replications)) for key, e in errors.items()},
    }


@pytest.mark.slow  # statistical: 200 replications
def test_the_weighted_estimators_cover_the_truth_at_their_promised_rate() -> None:
    """The agent uses a lookup with the model's own probability: the reward model (per site and
    tool) is wrong, the propensities are right. 200 replications of 360 decisions."""
    found = coverage("context", Target("reach", 0.5), replications=200, bootstrap=100)
    # measured: 0.89–0.95 for every weighted estimator, metric and interval; direct 0.06–0.23
    print("\ntruth", found["truth"])
    for key, rate in sorted(found["coverage"].items()):
        print("coverage", key, rate, "bias", found["bias"][key[0], key[2]])
    for name in ("labelled", "ips", "snips", "dr", "sndr", "switch_dr"):
        for metric in ("used", "detours", "turns"):
            for kind in ("analytic", "bootstrap"):
                assert found["coverage"][(name, kind, metric)] >= 0.85, (name, kind, metric)
            # unbiased (IPS, DR) or nearly so (the self-normalized ones, Switch-DR)
            bias, se = found["bias"][(name, metric)], found["bias_se"][(name, metric)]
            assert abs(bias) <= 3.5 * se + 0.01 * found["truth"][1], (name, metric, bias, se)
    # the test can tell: the direct method's model misses here, and its intervals do not cover
    assert found["coverage"][("direct", "analytic", "used")] < 0.5
    assert found["coverage"][("direct", "bootstrap", "used")] < 0.5


@pytest.mark.slow  # statistical: 200 replications
def test_the_direct_method_covers_the_truth_when_its_model_is_right() -> None:
    """The agent's use depends only on site and tool: the reward model is the right one. The
    habit target differs from the logging rule more (more weight on fewer decisions)."""
    found = coverage(
        "site-and-tool", Target("habit", 0.4), replications=200, bootstrap=0, min_ess=0
    )
    # measured: direct 0.885 / 0.94 / 0.925 (used, detours, turns); IPS, whose heavy weights
    # suit a normal interval least, 0.87 / 0.905 / 0.87
    for metric in ("used", "detours", "turns"):
        for name in ("direct", "labelled", "ips", "snips", "dr", "sndr", "switch_dr"):
            assert found["coverage"][(name, "analytic", metric)] >= 0.85, (name, metric)
        bias, se = found["bias"][("direct", metric)], found["bias_se"][("direct", metric)]
        assert abs(bias) <= 3.5 * se + 0.01 * found["truth"][1]


def test_with_a_model_exactly_right_the_direct_method_is_exact() -> None:
    labelled = simulate(np.random.default_rng(11), "exact")
    target = Target("reach", 0.5)
    (result,) = evaluate(labelled, [target], bootstrap=0)
    truth = np.zeros(4)
    for row in labelled.rows:
        act = target_action(row, target)
        if act is not None:
            truth += values(row["labels"][act])
    total = result["total"]
    for name in ("labelled", "direct", "dr", "sndr", "switch_dr"):
        assert [total[name][m] for m in METRICS] == pytest.approx(list(truth), abs=1e-9), name
    assert total["ips"]["used"] != pytest.approx(truth[1], abs=1e-9)  # IPS is only unbiased


def test_few_effective_samples_refuse_the_weighted_estimates() -> None:
    labelled = simulate(np.random.default_rng(1), "context", sessions=2, per_session=4)
    (result,) = evaluate(labelled, [Target("habit", 0.3)], bootstrap=50)
    total = result["total"]
    assert total["ess"] < 10 and total["refused"]
    assert total["refusal"] == f"effective sample size {total['ess']:.1f} is under 10 (--min-ess)"
    for name in ("ips", "snips", "dr", "sndr", "switch_dr"):
        assert total[name] is None and total["intervals"][name] is None
    assert total["ips_se"] is None and total["dr_se"] is None
    assert total["direct"] is not None and total["labelled"] is not None
    (allowed,) = evaluate(labelled, [Target("habit", 0.3)], min_ess=0, bootstrap=0)
    assert allowed["total"]["ips"] is not None and not allowed["total"]["refused"]


# --- one evaluation pinned: the numbers of the module before it was split -------------------

PINNED = Path(__file__).with_name("evaluate_pinned.jsonl")
PINNED_TOOLS = {"a": ["x", "y", "z"], "b": ["w", "x"], "c": ["v"], "d": ["x", "v"]}


def pinned_labelled() -> Labelled:
    """48 decisions in 8 sessions at four sites (d has one), served by the reach rule at 0.3
    exploring at ε = 0.3; some options do not bind, some have p = 0. Drawn with Python's own
    generator, whose stream does not change between versions."""
    rng = random.Random(2026)
    rows = []
    for s in range(8):
        for d in range(6):
            u = rng.random()
            site = "a" if u < 0.5 else "b" if u < 0.85 else "c"
            if (s, d) == (7, 5):
                site = "d"  # a site of one decision: no standard error
            options = []
            for tool in PINNED_TOOLS[site]:
                prob = 0.0 if rng.random() < 0.1 else round(rng.random(), 3)
                habit = round(rng.random(), 3)
                bound = rng.random() < 0.85
                options.append(
                    Option(
                        tool,
                        prob,
                        habit,
                        round(0.5 + 0.5 * rng.random(), 3) if bound else None,
                        {"k": f"{tool}{d % 3}"} if bound else None,
                        None if bound else f"{tool}: no source",
                    )
                )
            decision = Decider.reach_rule(options, 0.3)
            decision.site, decision.options = site, options
            taken, record = explore(decision, 0.3, SplitMix64(100 * s + d))
            labels = []
            for o in options:
                used = o.arguments is not None and rng.random() < o.prob
                calls = 1 + int(3 * rng.random())
                labels.append(
                    {
                        "used": used,
                        "detour": o.arguments is not None and not used,
                        "turn": used / calls,
                        "next": used and rng.random() < 0.5,
                    }
                )
            entry = {
                "address": "decide#0",
                "after": d,
                "site": site,
                "action": taken.action,
                "tool": taken.tool,
                "arguments": taken.arguments,
                "explore": record,
            }
            row = labelled_row(entry, labels, f"session {s}, decision {d}")
            row.update(session=f"s{s}", file="pinned", line=d + 1)
            rows.append(row)
    return Labelled("pinned", 8, rows, "pinned", "reach")


def test_one_evaluation_is_pinned_to_the_numbers_before_the_split() -> None:
    """Every estimate, standard error, interval (analytic and bootstrap) and weight diagnostic
    of two targets, per site and in total, as the single-module evaluate (commit 14bf445)
    computed them, to 12 significant digits. reach@0.6 refuses site c; habit@0.4 refuses site
    b, and has weights over τ = 5 and options the logging rule could not take. The bootstrap
    draws come from numpy's default generator: a numpy that changes its stream changes them."""
    results = evaluate(
        pinned_labelled(),
        [Target("reach", 0.6), Target("habit", 0.4)],
        min_ess=3.0,
        switch_tau=5.0,
        bootstrap=200,
        seed=1,
    )
    estimates, diagnostics = estimate_rows(results)
    expected: dict[str, list] = {"diagnostics": [], "estimates": []}
    columns: dict[str, list[str]] = {}
    for text in PINNED.read_text().splitlines():
        table, *cells = json.loads(text)
        if table not in columns:
            columns[table] = cells
        else:
            expected[table].append(dict(zip(columns[table], cells, strict=True)))
    for table, rows in (("diagnostics", diagnostics), ("estimates", estimates)):
        assert len(rows) == len(expected[table]), table
        for row, pinned in zip(rows, expected[table], strict=True):
            for column, value in pinned.items():
                where = (table, row["target"], row["site"], row.get("estimator"), column)
                if isinstance(value, float):
                    assert row[column] == pytest.approx(value, rel=1e-11, abs=1e-11), where
                else:
                    assert row[column] == value, where
    # the rows carry the result whole: the standard errors shown twice agree
    for result in results:
        for scope in [result["total"], *result["sites"].values()]:
            assert scope["ips_se"] == scope["se"]["ips"] and scope["dr_se"] == scope["se"]["dr"]
            assert scope["refused"] == (scope["refusal"] is not None)


def test_empty_tables_keep_their_typed_columns(tmp_path: Path) -> None:
    written = write_tables(Labelled("empty", 0, [], "none", None), [], tmp_path)
    assert [p.name for p in written] == [
        "decisions.parquet",
        "options.parquet",
        "estimates.parquet",
        "diagnostics.parquet",
        "report.md",
    ]
    schemas = {p.stem: pq.read_schema(p) for p in written if p.suffix == ".parquet"}
    assert all(pq.read_table(tmp_path / f"{name}.parquet").num_rows == 0 for name in schemas)
    types = {name: {f.name: str(f.type) for f in schema} for name, schema in schemas.items()}
    assert types["decisions"]["line"] == "int64" and types["decisions"]["executed"] == "bool"
    assert types["options"]["turn"] == "double" and types["options"]["arguments"].endswith("string")
    assert types["estimates"]["se"] == "double" and types["estimates"]["site"].endswith("string")
    assert types["diagnostics"]["looks"] == "int64" and types["diagnostics"]["ess"] == "double"
    assert list(types["estimates"]) == [
        "target",
        "decider",
        "threshold",
        "site",
        "estimator",
        "metric",
        "estimate",
        "se",
        "analytic_low",
        "analytic_high",
        "bootstrap_low",
        "bootstrap_high",
        "refusal",
    ]
    assert (tmp_path / "report.md").read_text() == "# Evaluation\n\nNo targets.\n"


# --- labels from session logs, by hand ------------------------------------------------------

TOOL_LIST = {
    "tools": [
        {"name": "a", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
        {"name": "b", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
        {"name": "w", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": False}},
    ]
}


def _wire(t_ms: int, sender: str, message: dict) -> dict:
    return {"t_ms": t_ms, "from": sender, "message": {"jsonrpc": "2.0", **message}}


def _call(t_ms: int, sender: str, call_id, tool: str, k: str) -> dict:
    params = {"name": tool, "arguments": {"k": k}}
    return _wire(t_ms, sender, {"id": call_id, "method": "tools/call", "params": params})


def _answer(t_ms: int, call_id, text: str = "ok") -> dict:
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    return _wire(t_ms, "server", {"id": call_id, "result": result})


def _option(tool: str, p: float, k: str | None, binding: float = 1.0) -> dict:
    return {
        "tool": tool,
        "prob": p,
        "habit": p / 2,
        "binding": None if k is None else binding,
        "arguments": None if k is None else {"k": k},
        "unbound": None if k is not None else f"{tool}: no source for `k`",
    }


def _decision(after, address, site, options, explored, propensity, tool=None, k=None) -> dict:
    line = {
        "address": address,
        "after": after,
        "site": site,
        "shadow": False,
        "explore": {
            "epsilon": 0.4,
            "options": options,
            "explored": explored,
            "propensity": propensity,
        },
    }
    if tool:
        line.update(action="lookup", tool=tool, arguments={"k": k})
    else:
        line.update(action="hand_back", reason="...")
    return line


def _write_jsonl(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def hand_made(folder: Path) -> Path:
    """One session: the agent calls a(1); then a(2) and b(1) together (one turn of two); then
    the write w; then a(4). The flow runs after a(1) (looking up b(1), explored, then a(4)),
    after a(2) (handing back), and after a(4) (b(1) again)."""
    folder.mkdir(parents=True, exist_ok=True)
    header = {"stretto_mcp_log": 2, "session": "S1", "started_unix_ms": 0, "domain": "hand"}
    session = [
        header,
        _wire(0, "client", {"id": 1, "method": "initialize", "params": {}}),
        _wire(1, "server", {"id": 1, "result": {}}),
        _wire(2, "client", {"id": 2, "method": "tools/list", "params": {}}),
        _wire(3, "server", {"id": 2, "result": TOOL_LIST}),
        _call(1000, "client", 3, "a", "1"),
        _answer(1001, 3),
        _call(1002, "proxy", "stretto-1", "b", "1"),
        _answer(1003, "stretto-1"),
        _call(1004, "proxy", "stretto-2", "a", "4"),
        _answer(1005, "stretto-2"),
        _call(3000, "client", 4, "a", "2"),
        _call(3001, "client", 5, "b", "1"),
        _answer(3002, 4),
        _answer(3003, 5),
        _call(6000, "client", 6, "w", "9"),
        _answer(6001, 6),
        _call(9000, "client", 7, "a", "4"),
        _answer(9001, 7),
    ]
    flow = [
        _decision(
            3,
            "decide#0",
            "a",
            [_option("a", 0.9, "2"), _option("b", 0.5, "1")],
            True,
            0.4,
            "b",
            "1",
        ),
        _decision(
            3,
            "decide#1",
            "b",
            [_option("a", 0.8, "4"), _option("b", 0.6, "1")],
            False,
            0.6,
            "a",
            "4",
        ),
        {"after": 3, "run": {"call": "a", "failed": False, "sites": []}},
        _decision(
            4, "decide#0", "a", [_option("a", 0.2, "4"), _option("b", 0.9, None)], False, 0.6
        ),
        {"after": 4, "run": {"call": "a", "failed": False, "sites": []}},
        {"address": "decide#0", "after": 6, "site": None, "action": "hand_back", "reason": "..."},
        {"after": 6, "run": {"call": "w", "failed": False, "sites": []}},
        _decision(7, "decide#0", "a", [_option("b", 0.7, "1", 0.9)], False, 1.0, "b", "1"),
        {"after": 7, "run": {"call": "a", "failed": False, "sites": []}},
    ]
    _write_jsonl(folder / "S1.jsonl", session)
    _write_jsonl(folder / "S1.flow.jsonl", flow)
    return folder


def test_labels_by_hand(tmp_path: Path) -> None:
    labelled = label_folder(hand_made(tmp_path / "logs"))
    assert labelled.sessions == 1 and labelled.skipped == 1 and labelled.domain == "hand"
    assert labelled.logging_decider == "reach" and labelled.explored == 1
    first, second, third, fourth = labelled.rows
    used, detour = {"used": True, "detour": False}, {"used": False, "detour": True}
    # after a(1): a(2) is the agent's next call, made in a turn of two
    assert first["labels"] == [
        {**used, "turn": 0.5, "next": True},
        {**used, "turn": 0.5, "next": False},
    ]
    # the greedy choice (a, 0.9) told by the explored option's propensity 0.4·0.5/0.5
    assert (first["taken"], first["greedy"], first["greedy_inferred"]) == (1, "a", True)
    assert [o["propensity"] for o in first["options"]] == [0.6, 0.4]
    # a(4) comes after the write; b(1) the flow had just looked up itself
    assert second["labels"] == [{**detour, "turn": 0.0, "next": False}] * 2
    # after a(2): b(1) went out with it (in flight, already asked); an option that does not bind
    assert third["labels"] == [
        {**detour, "turn": 0.0, "next": False},
        {"used": False, "detour": False, "turn": 0.0, "next": False},
    ]
    assert (third["taken"], third["hand_back_propensity"]) == (None, 0.6)
    assert fourth["labels"] == [{**detour, "turn": 0.0, "next": False}]
    assert [r["executed"] for r in labelled.rows] == [True, True, False, True]

    (result,) = evaluate(labelled, [Target("reach", 0.3)], min_ess=0, bootstrap=0)
    total = result["total"]
    # the target takes a(2) (used, half a turn), a(4) and b(1) (detours), and hands back once
    assert [total["labelled"][m] for m in METRICS] == [3.0, 1.0, 2.0, 0.5]
    assert [total["logged"][m] for m in METRICS] == [3.0, 1.0, 2.0, 0.5]
    # it took what was logged at a(4) (propensity 0.6) and b(1) (1): IPS by hand
    assert [total["ips"][m] for m in METRICS] == pytest.approx([1 / 0.6 + 1, 0, 1 / 0.6 + 1, 0])
    assert total["ess"] == pytest.approx((1 / 0.6 + 1) ** 2 / (1 / 0.36 + 1))
    assert (total["looks"], total["matched"], total["decisions"]) == (3, 2, 4)
    # the reward model: b was taken at site a twice (used once: (1, .5, .5, .25)); a at site b
    # once (a detour); so a(2) at site a falls back to a anywhere
    assert total["direct"]["used"] == pytest.approx(0 + 0 + 0.5)
    refused = evaluate(labelled, [Target("reach", 0.3)], bootstrap=0)[0]["total"]
    assert refused["refusal"] == "effective sample size 1.9 is under 10 (--min-ess)"


def test_logs_without_propensities_and_mismatched_files_are_refused(tmp_path: Path) -> None:
    folder = hand_made(tmp_path / "a")
    lines = (folder / "S1.flow.jsonl").read_text().splitlines()
    plain = json.loads(lines[0])
    del plain["explore"]
    (folder / "S1.flow.jsonl").write_text("\n".join([json.dumps(plain), *lines[1:]]) + "\n")
    with pytest.raises(EvaluateError, match=r"S1.flow.jsonl:1: .*logs without propensities"):
        label_folder(folder)

    folder = hand_made(tmp_path / "b")
    (folder / "S1.jsonl").rename(folder / "S2.jsonl")
    with pytest.raises(EvaluateError, match=r"S1.flow.jsonl: no session log S1.jsonl beside it"):
        label_folder(folder)

    folder = hand_made(tmp_path / "c")
    lines = (folder / "S1.flow.jsonl").read_text().splitlines()
    (folder / "S1.flow.jsonl").write_text(lines[0].replace('"after": 3', '"after": 99') + "\n")
    with pytest.raises(EvaluateError, match=r"S1.flow.jsonl:1: `after` 99 names no answered"):
        label_folder(folder)

    folder = hand_made(tmp_path / "d")
    lines = (folder / "S1.flow.jsonl").read_text().splitlines()
    (folder / "S1.flow.jsonl").write_text(
        lines[0].replace('"propensity": 0.4', '"propensity": 0.3') + "\n"
    )
    with pytest.raises(EvaluateError, match=r"S1.flow.jsonl:1: field `explore.propensity`"):
        label_folder(folder)

    (tmp_path / "e").mkdir()
    with pytest.raises(EvaluateError, match="no flow logs"):
        label_folder(tmp_path / "e")

    labelled = label_folder(hand_made(tmp_path / "f"))
    labelled.logging_decider = "habit"
    with pytest.raises(EvaluateError, match="no reach probabilities"):
        evaluate(labelled, [Target("reach", 0.3)])


def test_the_package_imports_without_dagster_or_polars() -> None:
    """The CLI and the asset share it: importing it pulls neither the pipeline nor polars,
    which only writing the tables needs (a fresh interpreter, to see what it imports)."""
    code = (
        "import sys; import stretto.offline.evaluate as ev; "
        "print(sorted(m for m in ('dagster', 'polars', 'pyarrow') if m in sys.modules)); "
        "print(ev.targets.__module__, ev.label_folder.__module__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [
        "[]",
        "stretto.offline.evaluate.target stretto.offline.evaluate.labelling",
    ]


def test_the_command_refuses_the_reference_logs_which_carry_no_propensities() -> None:
    done = stretto("evaluate", "--sessions", REFERENCE_HOME / "served/shop")
    assert done.returncode == 1
    assert "logs without propensities are refused" in done.stderr
    assert ".flow.jsonl:1: " in done.stderr and done.stdout == ""


# --- end to end: a real proxy exploring over the real filesystem server ---------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict:
    """A notes flow learned from sessions that search and then read (sometimes looking at each
    file's info first); then three sessions served with --flow-explore 0.5, in which the agent
    searches, reads two of the three files found, writes, and reads the third."""
    base = tmp_path_factory.mktemp("evaluate")
    notes = base / "notes"
    notes.mkdir()
    for day in ("08-12", "09-03", "10-05", "10-14", "10-26"):
        (notes / f"2026-{day}.md").write_text(f"# Meeting 2026-{day}\n")
    patterns = ["**/2026-08-*", "**/2026-09-*", "**/2026-10-*", "**/2026-*", "**/*-1*"]
    agents = [searches_then_reads(notes, p, info=i % 2 == 1) for i, p in enumerate(patterns)]
    flow = notes_flow(base, agents, folder=notes, logs=base / "train")
    logs = base / "served"
    paths = []
    for _ in range(3):
        command = served_notes(notes, flow, logs, "--flow-explore", "0.5")
        with StdioClient(command) as agent:
            agent.initialize()
            agent.list_tools()
            found = agent.call_tool("search_files", {"path": str(notes), "pattern": "**/2026-10-*"})
            paths = sorted(p for p in result_text(found).splitlines() if p.startswith("/"))
            # a pause between calls, kept: each is its own LLM turn, which the proxy's own
            # timestamps must show (the turn rule's 500 ms); the lapse is what is recorded
            for tool, arguments in [
                ("read_text_file", {"path": paths[0]}),
                ("read_text_file", {"path": paths[1]}),
                ("write_file", {"path": str(notes / "summary.md"), "content": "done"}),
                ("read_text_file", {"path": paths[2]}),
            ]:
                time.sleep(0.6)
                agent.call_tool(tool, arguments)
            agent.close()
    return {"base": base, "logs": logs, "flow": flow, "paths": paths}


@pytest.mark.slow  # records exploring sessions through real proxies
def test_the_command_labels_and_evaluates_a_real_proxys_exploring_logs(served, tmp_path) -> None:
    out = tmp_path / "tables"
    done = stretto(
        "evaluate",
        "--sessions",
        served["logs"],
        "--flow",
        served["flow"],
        "--decider",
        "reach",
        "--decider",
        "habit",
        "--threshold",
        "0.3",
        "--threshold",
        "0.9",
        "--min-ess",
        "1",
        "--bootstrap",
        "200",
        "--json",
        "--out",
        out,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert [r["target"]["name"] for r in results] == [
        "reach@0.3",
        "reach@0.9",
        "habit@0.3",
        "habit@0.9",
    ]
    p1, p2, p3 = served["paths"]
    # The agent's calls by JSON-RPC id: 3 search, 4 read p1, 5 read p2, 6 write, 7 read p3.
    # What it reads itself after each, before its next write, and its very next read:
    later = {3: {p1, p2}, 4: {p2}, 5: set(), 6: {p3}, 7: set()}
    following = {3: p1, 4: p2, 5: None, 6: p3, 7: None}
    options = pq.read_table(out / "options.parquet").to_pylist()
    decisions = pq.read_table(out / "decisions.parquet").to_pylist()
    by_decision = {(d["session"], d["line"]): d for d in decisions}
    seen = {"used": 0, "detour": 0, "next": 0}
    for o in options:
        after = int(by_decision[(o["session"], o["line"])]["after"])
        if o["arguments"] is None:
            assert (o["used"], o["detour"], o["turn"], o["next"]) == (False, False, 0.0, False)
            continue
        path = json.loads(o["arguments"])["path"]
        used = o["tool"] == "read_text_file" and path in later[after]
        assert (o["used"], o["detour"]) == (used, not used), o
        assert o["next"] == (used and path == following[after]), o
        assert o["turn"] == (1.0 if used else 0.0), o
        seen["used"] += used
        seen["detour"] += not used
        seen["next"] += o["next"]
    assert seen["used"] and seen["detour"] and seen["next"]
    # every decision line with a site became a labelled decision, its propensity checked
    lines = [
        json.loads(line)
        for path in sorted(served["logs"].glob("*.flow.jsonl"))
        for line in path.read_text().splitlines()
    ]
    logged = [line for line in lines if "address" in line and line["site"] is not None]
    assert len(decisions) == len(logged) == results[0]["settings"]["decisions"]
    for d, line in zip(decisions, logged, strict=True):
        # the proxy logs the rule's own choice: nothing left to infer
        assert d["greedy"] == line["explore"]["greedy"] and not d["greedy_inferred"]
        if d["explored"]:
            assert d["propensity"] < 0.5 + 1e-12 and d["tool"] != d["greedy"]
    # what was logged is the same whatever the target; by hand from the labels of the taken
    taken = [o for o in options if o["taken"]]
    total = results[0]["total"]
    assert total["logged"]["lookups"] == len(taken)
    assert total["logged"]["used"] == sum(o["used"] for o in taken)
    assert {"decisions", "options", "estimates", "diagnostics"} <= {
        p.stem for p in out.glob("*.parquet")
    }
    estimates = pq.read_table(out / "estimates.parquet").to_pylist()
    row = next(
        e
        for e in estimates
        if (e["target"], e["site"], e["estimator"], e["metric"])
        == ("reach@0.3", None, "dr", "used")
    )
    assert row["estimate"] == total["dr"]["used"]

    markdown = stretto(
        "evaluate", "--sessions", served["logs"], "--bootstrap", "50", "--out", tmp_path / "md"
    )
    assert markdown.returncode == 0, markdown.stderr
    assert markdown.stdout.startswith("# Evaluation\n\n")
    assert "## reach@0.3" in markdown.stdout and "| Switch-DR |" in markdown.stdout
    assert f"{len(decisions)} decisions in 3 sessions" in markdown.stdout


@pytest.mark.slow  # the same exploring sessions recorded through real proxies
def test_the_evaluation_writes_private_files_whatever_the_umask(served, tmp_path) -> None:
    from tests.private import loose, umask

    out, home = tmp_path / "new/tables", tmp_path / "home"
    args = ["evaluate", "--sessions", served["logs"], "--bootstrap", "0"]
    with umask(0o022):
        done = stretto(*args, "--out", out)
        assert done.returncode == 0, done.stderr
        done = stretto(*args, "--home", home)
        assert done.returncode == 0, done.stderr
    # options.parquet holds the bound argument values
    assert pq.read_table(out / "options.parquet").num_rows > 0 and (out / "report.md").is_file()
    assert loose(tmp_path / "new") == {}
    assert any((home / "reports").rglob("options.parquet")) and loose(home) == {}


@pytest.mark.slow  # the same exploring sessions recorded through real proxies
def test_the_evaluation_asset_writes_the_tables(served, tmp_path) -> None:
    from assets.evaluate import evaluation
    from pipeline.run import materialize, output_metadata

    home = tmp_path / "home"
    config = {
        "sessions": str(served["logs"]),
        "thresholds": [0.3, 0.6],
        "deciders": ["reach"],
        "min_ess": 1.0,
        "bootstrap": 100,
    }
    result = materialize([evaluation], str(home), 10, {"evaluation": config}, "notes")
    assert result.success
    metadata = output_metadata(result, "evaluation")
    assert metadata["targets"] == "reach@0.3, reach@0.6"
    assert metadata["report"].startswith("# Evaluation")
    (folder,) = (home / "reports/notes").glob("evaluation-*")
    assert metadata["tables"] == str(folder)
    diagnostics = pq.read_table(folder / "diagnostics.parquet").to_pylist()
    totals = [d for d in diagnostics if d["site"] is None]
    assert [d["target"] for d in totals] == ["reach@0.3", "reach@0.6"]
    assert pq.read_table(folder / "decisions.parquet").num_rows == metadata["decisions"]
    records = metadata["totals"].records
    assert len(records) == 2 * 8  # two targets, eight estimators
