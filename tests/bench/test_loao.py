"""Leaving one agent out (bench/quality.py --loao, issue 42): the flow judged on an agent is
learned from the other agents' training episodes only — never from the left-out agent's, not
through the logs written for learning, the calibration's failed episodes or the flow cache —
and a change that loses left-out agents is not kept."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench import quality as q
from bench.paired import MEASURES, Run
from stretto.logs.sessionlog import parse_session_log


def test_an_agent_is_its_model_without_provider_or_release_date() -> None:
    assert q.agent_key("gpt-4.1-mini-2025-04-14") == "gpt-4.1-mini"
    assert q.agent_key("gpt-4.1-mini") == "gpt-4.1-mini"
    assert q.agent_key("azure/gpt-4o-2024-11-20") == "gpt-4o"
    assert q.agent_key("ollama_chat/qwen2.5:7b") == "qwen2.5:7b"
    fine_tune = "ft:gpt-4.1-2025-04-14:sierra:tau2-full-sft:BzrYdMNm"
    assert q.agent_key(fine_tune) == fine_tune


def test_the_data_has_both_kinds_of_agent(retail: q.Domain) -> None:
    """What the tests below rely on: one agent ran training tasks, one only test tasks."""
    assert q.tested_agents(retail) == ["gpt-4.1", "gpt-4.1-mini"]
    trained = {q.agent_key(e.agent_model) for e in retail.train}
    assert trained == {"gpt-4.1-mini"}
    assert any(not e.succeeded for e in retail.train)  # failed ones, which calibration reads


@pytest.mark.parametrize("agent", ["gpt-4.1", "gpt-4.1-mini"])
def test_the_split_never_trains_on_the_left_out_agent(
    retail: q.Domain, agent: str, tmp_path: Path
) -> None:
    split = q.left_out(retail, agent)
    mine = {e.id for e in retail.train if q.agent_key(e.agent_model) == agent}
    # the training episodes: every other agent's, none of this one's
    assert not {e.id for e in split.train} & mine
    assert len(split.train) == len(retail.train) - len(mine)
    # nor the failed ones a calibration map is fitted on
    assert not {e.id for e in q.calibration_episodes(split, split.train_ok)} & mine
    # nor the logs written for learning (read back from the files)
    for results in split.results:
        assert not {s.session for s in results.simulations} & mine
    written = q.write_training_logs(split, [e.id for e in split.train], tmp_path)
    models = {
        q.agent_key(parse_session_log(path.read_bytes(), path).header.agent_model or "")
        for path in written.rglob("*.jsonl")
    }
    assert agent not in models
    assert len(list(written.rglob("*.jsonl"))) == len(split.train)
    # judged on this agent's test episodes, all of them
    assert {q.agent_key(e.agent_model) for _, e in split.test} == {agent}
    assert len(split.test) == sum(1 for _, e in retail.test if q.agent_key(e.agent_model) == agent)


def test_an_agent_that_ran_every_training_task_leaves_nothing_to_learn(
    retail: q.Domain,
) -> None:
    """Retail's training tasks were run by gpt-4.1-mini alone (two harnesses, one model)."""
    split = q.left_out(retail, "gpt-4.1-mini")
    assert split.train == [] and split.train_ok == []
    assert split.scope == "gpt-4.1-mini"


def test_an_agent_without_training_episodes_sees_the_visible_flow(retail: q.Domain) -> None:
    split = q.left_out(retail, "gpt-4.1")
    assert split.scope is None
    assert [e.id for e in split.train] == [e.id for e in retail.train]


def test_a_left_out_flow_is_cached_apart_from_the_visible_one(
    retail: q.Domain, tmp_path: Path, monkeypatch
) -> None:
    """The same successful episodes without an agent's failed ones calibrate another flow:
    the cache must not hand back the one fitted with them."""
    monkeypatch.setattr(q, "CACHE", tmp_path)
    monkeypatch.setattr(q, "write_flow", lambda flow, path: path.write_text(json.dumps(flow)))
    monkeypatch.setattr(q, "load_flow", lambda path: json.loads(path.read_text()))
    learned: list[str | None] = []

    def make(domain: q.Domain, ids: list[str]) -> dict:
        learned.append(domain.scope)
        return {"failed": sum(1 for e in domain.train if not e.succeeded)}

    learner = q.Learner("probe", make)
    without = replace(retail, train=[e for e in retail.train if e.succeeded], scope="someone")
    ids = retail.train_ok
    assert learner(retail, ids)["failed"] > 0
    assert learner(without, ids) == {"failed": 0}
    assert learner(without, ids) == {"failed": 0}  # from the cache now
    assert learned == [None, "someone"]


def comparison(**changes: tuple[float, float]) -> dict:
    """A paired comparison with every measure's difference 0 [−1, +1] but `changes`."""
    out = {m: (0.0, 0.0, 0.0, -1.0, 1.0) for m in MEASURES}
    for name, (lo, hi) in changes.items():
        out[name.replace("_", " ").replace("share", "ceiling %")] = (0.0, 0.0, lo, lo, hi)
    return out


def test_winning_on_visible_agents_but_losing_left_out_ones_is_not_kept() -> None:
    wins = comparison(share=(2.0, 5.0))
    loses = comparison(share=(-6.0, -1.0))
    said = q.keep_rule({"all": wins, "whissle": wins}, {"all": comparison(), "whissle": loses})
    assert said.startswith("not kept: loses left-out agents (wins on the visible agents)")
    assert "whissle: ceiling %" in said


def test_a_gain_without_a_loss_anywhere_is_kept() -> None:
    said = q.keep_rule({"all": comparison(share=(1.0, 3.0))}, {"all": comparison()})
    assert said.startswith("kept: gains visible ceiling %")
    assert q.keep_rule({"all": comparison()}, {"all": comparison()}).startswith(
        "not kept: no significant gain"
    )


def test_the_goal_wants_both_the_share_and_the_detours() -> None:
    def figures(share: float, detours: float, missing: bool = False) -> dict:
        held = [q.Held("a", ["a"], 20, [], [], Run(), "a")]
        held += [q.Held("b", ["b"], 20, [], [], None, "b")] if missing else []
        return {
            "all": {},
            "held": held,
            "intervals": {"ceiling %": (share, 0.0, 100.0), "detours/ep": (detours, 0.0, 9.0)},
        }

    assert q.goal(figures(55.4, 1.0))[0] is True
    met, said = q.goal(figures(55.4, 1.04))
    assert met is False and said.endswith("(detours above 1)")
    met, said = q.goal(figures(54.9, 0.5, missing=True))
    assert met is False and "share below 55%" in said and "b cannot be left out" in said
    assert q.goal({"held": []})[0] is None
