"""The arbiter decider offline — audit, replay, search, promote — asking the model the flow's
arbiter was fitted with, or only its cache (`--oracle replay`, the default), leaving out and
counting what it cannot answer; and the review of a flow with an arbiter (flow-show,
flow-diff, a bad arbiter part refused)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretto.cli.main import main
from stretto.logs.merged import read_episodes
from stretto.model.binding import SessionState
from stretto.model.decide import Decider
from stretto.offline.episode_judges import OracleOptions
from stretto.offline.reports.audit import audit
from stretto.offline.reports.replay import replay
from stretto.oracle.arbiter import load_flow
from tests.conftest import REFERENCE_HOME

SHOP = REFERENCE_HOME / "logs/shop"


@pytest.fixture(scope="module")
def learned(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("arbiter-flow")
    out, cache = tmp / "shop.flow.json", tmp / "cache"
    argv = ["learn", "--sessions", str(SHOP), "--domain", "shop", "--out", str(out)]
    argv += ["--home", str(tmp / "home"), "--oracle", "simulate://habit"]
    assert main([*argv, "--oracle-cache", str(cache)]) == 0
    return out, cache


def test_audit_scores_what_the_cache_answers_and_counts_the_rest(learned, tmp_path, capsys):
    out, cache = learned
    status = main(
        ["audit", "--flow", str(out), "--sessions", str(SHOP), "--out", str(tmp_path / "a")]
        + ["--oracle-cache", str(cache)]
    )
    assert status == 0
    report, err = capsys.readouterr()
    assert report.startswith("# Audit (arbiter decider)")  # the default with an arbiter
    # the held-out sessions' decisions are in the cache; the training sessions' are not
    flow, episodes = load_flow(out), read_episodes(SHOP)
    cached = audit(flow, episodes, "arbiter", OracleOptions(cache=cache))
    live = audit(flow, episodes, "arbiter", OracleOptions("simulate://habit", tmp_path / "c"))
    assert live.unanswered == 0 and len(live.decisions) == flow["arbiter"]["cases"] + (
        cached.unanswered
    )
    assert 0 < len(cached.decisions) and 0 < cached.unanswered
    assert f"({cached.unanswered} left out: no answer from the oracle)" in report
    assert f"stretto: {cached.unanswered} decisions left out" in err
    # the judgement's probabilities, scored: each decision's options carry the coverage
    assert all(0 < d["p_actual"] <= 1 for d in live.decisions)


def test_replay_with_the_arbiter_is_the_same_twice_and_counts_the_unanswered(
    learned, tmp_path
) -> None:
    out, _ = learned
    flow, episodes = load_flow(out), read_episodes(SHOP)
    live = OracleOptions("simulate://habit", tmp_path / "cache")
    first = replay(flow, episodes, decider="arbiter", explore=0.0, oracle=live)
    second = replay(flow, episodes, decider="arbiter", explore=0.0, oracle=live)
    assert first.as_json() == second.as_json() and first.decider == "arbiter"
    assert first.total()["unanswered"] == 0 and first.total()["flow_lookups"] > 0
    empty = replay(flow, episodes, oracle=OracleOptions(cache=tmp_path / "empty"))
    assert empty.decider == "arbiter"  # the flow's default
    assert empty.total()["unanswered"] > 0 and empty.total()["flow_lookups"] == 0


def test_promote_and_search_ask_the_same_way(learned, tmp_path, capsys) -> None:
    out, cache = learned
    status = main(
        ["promote", "--flow", str(out), "--shadow", str(SHOP), "--out", str(tmp_path / "p.json")]
        + ["--oracle-cache", str(tmp_path / "empty"), "--min-tasks", "1"]
    )
    assert status == 0
    err = capsys.readouterr().err
    assert "decisions left out, unanswered); promoted 0 of" in err
    status = main(
        ["search", "--flow", str(out), "--sessions", str(SHOP), "--dry-run", "--json"]
        + ["--oracle", "simulate://habit", "--oracle-cache", str(tmp_path / "s")]
    )
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert report["decider"] == "arbiter" and report["evaluated"] > 0


def test_a_decider_the_flow_cannot_serve_is_refused(learned, tmp_path, capsys) -> None:
    out, _ = learned
    plain = json.loads(out.read_text())
    del plain["arbiter"]
    path = tmp_path / "plain.flow.json"
    path.write_text(json.dumps(plain))
    assert (
        main(["audit", "--flow", str(path), "--sessions", str(SHOP), "--decider", "arbiter"]) == 1
    )
    assert "this flow has no arbiter" in capsys.readouterr().err
    assert main(["replay", "--flow", str(out), "--sessions", str(SHOP), "--oracle", "x://y"]) == 1
    assert "no runner for `x://`" in capsys.readouterr().err
    decider = Decider(load_flow(out))
    assert decider.kind == "arbiter"  # the default for a flow with an arbiter
    with pytest.raises(ValueError, match="needs a judge"):
        last = ("find_user_id_by_email", False)
        decider.decide(["find_user_id_by_email"], last, SessionState())


def test_flow_show_and_flow_diff_of_an_arbiter(learned, tmp_path, capsys) -> None:
    out, _ = learned
    assert main(["flow-show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "an arbiter asking simulate://habit" in shown and "## Arbiter" in shown
    assert "| ln habit | " in shown and "| reliability | " in shown
    assert main(["flow-show", str(out), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["arbiter"]["model"] == "simulate://habit" and len(data["arbiter"]["weights"]) == 1

    flow = json.loads(out.read_text())
    plain = tmp_path / "plain.flow.json"
    plain.write_text(json.dumps({k: v for k, v in flow.items() if k != "arbiter"}))
    assert main(["flow-diff", str(plain), str(out)]) == 1
    assert "- an arbiter added: it asks simulate://habit" in capsys.readouterr().out
    refitted = tmp_path / "refit.flow.json"
    folds = [{**f, "weights": [w + 0.5 for w in f["weights"]]} for f in flow["arbiter"]["folds"]]
    refitted.write_text(json.dumps({**flow, "arbiter": {**flow["arbiter"], "folds": folds}}))
    assert main(["flow-diff", str(out), str(refitted)]) == 0  # new weights: no review
    assert "the arbiter's weights changed" in capsys.readouterr().out
    other = tmp_path / "other.flow.json"
    other.write_text(json.dumps({**flow, "arbiter": {**flow["arbiter"], "model": "ollama://m"}}))
    assert main(["flow-diff", str(out), str(other)]) == 1
    assert "the arbiter asks another model: simulate://habit -> ollama://m" in (
        capsys.readouterr().out
    )


def test_a_bad_arbiter_part_is_refused_naming_the_field(learned, tmp_path, capsys) -> None:
    out, _ = learned
    flow = json.loads(out.read_text())
    flow["arbiter"]["folds"][0]["weights"] = [1.0] * 6  # the schema takes it; not 5
    bad = tmp_path / "bad.flow.json"
    bad.write_text(json.dumps(flow))
    assert main(["flow-show", str(bad)]) == 1
    assert capsys.readouterr().err == (
        f"stretto: {bad}: field `arbiter.folds[0].weights`: expected 5 numbers\n"
    )
    assert main(["flow-diff", str(out), str(bad)]) == 2
