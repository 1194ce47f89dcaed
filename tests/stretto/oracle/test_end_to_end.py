"""simulate://habit end to end on a flow learned from the reference's shop sessions: ask the
held-out sessions' decisions, fit the arbiter, write it into the flow, and judge decisions
with it from the cache (`replay`) — twice, byte for byte the same."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from stretto.logs.episode import Assistant, Episode, ToolResult, User
from stretto.logs.merged import read_episodes
from stretto.logs.steps import episode_steps
from stretto.model.flow import habit_model, load_flow, write_flow
from stretto.oracle.arbiter import new_arbiter
from stretto.oracle.budget import check_budget
from stretto.oracle.cache import AnswerCache
from stretto.oracle.fit import fit_folds
from stretto.oracle.judge import INCOMPLETE, ArbiterJudge, SiteAsker, site_lookups
from stretto.oracle.oracle import Oracle
from stretto.oracle.runners import open_runner
from stretto.oracle.scores import actual_option, options_at
from stretto.oracle.split import learn_split
from stretto.oracle.state import Conversation
from tests.conftest import REFERENCE_HOME

SHOP = REFERENCE_HOME / "logs/shop"


@dataclass
class Point:
    """A decision after one of the agent's calls, as a walk over a recorded episode sees it."""

    site: str
    prev: str
    lookups: list[str]
    habit: dict[str, float]
    conversation: Conversation
    index: int
    next_tool: str | None  # what the agent did next: a tool, or None for a reply or the end


def decision_points(flow: dict, episode: Episode):
    """A small walk for this test (the offline walk is stretto.offline's): after each of the
    agent's calls returns, the site, its lookups, the habit and the conversation so far."""
    steps = episode_steps(episode)
    position = {s.call_id: i for i, s in enumerate(steps) if s.call_id is not None}
    habit = habit_model(flow)
    conversation = Conversation()
    index = 0
    for event in episode.events:
        if isinstance(event, User):
            conversation.user_said(event.text)
        elif isinstance(event, Assistant):
            if event.text:
                conversation.assistant_replied(event.text)
            for call in event.calls:
                conversation.sent(call.id, call.name, call.arguments)
        elif isinstance(event, ToolResult):
            conversation.came_back(event.call_id, event.error, event.content)
            i = position.get(event.call_id)
            lookups = site_lookups(flow, event.name, event.error)
            if event.by_proxy or i is None or not lookups:
                continue
            history = [s.name() for s in steps[: i + 1]]
            following = steps[i + 1] if i + 1 < len(steps) else None
            yield Point(
                steps[i].name(),
                event.name,
                lookups,
                {t: habit.prob(t, history) for t in lookups},
                conversation,
                index,
                None if following is None or following.call_id is None else following.action,
            )
            index += 1


def learn_arbiter(flow_path: Path, work: Path) -> tuple[dict, list]:
    """What `learn` will do with an oracle, in small: split, ask, fit, write."""
    flow = load_flow(flow_path)
    episodes = read_episodes(SHOP)
    _, held = learn_split([e.id for e in episodes])
    oracle = Oracle(
        open_runner("simulate://habit"), AnswerCache(work / "cache"), log=work / "answers.jsonl"
    )
    questions = []
    for episode in (e for e in episodes if e.id in held):
        asker = SiteAsker(flow, oracle, session=episode.id)
        for point in decision_points(flow, episode):
            question = asker.question(
                site=point.site,
                prev=point.prev,
                lookups=point.lookups,
                habit=point.habit,
                conversation=point.conversation,
                index=point.index,
            )
            actual = actual_option(
                point.next_tool, options_at(point.lookups), flow["sites"]["reads"]
            )
            questions.append((asker, question, actual, episode.id))
    check_budget(oracle, [(q.request, q.context) for _, q, _, _ in questions], budget=0.0)
    cases = [asker.case(q, asker.ask(q), actual, task) for asker, q, actual, task in questions]
    arbiter = new_arbiter(model=oracle.model, folds=fit_folds(cases, []), tasks=len(held))
    flow["arbiter"] = arbiter.to_json()
    write_flow(flow, work / "shop.arbiter.flow.json")
    return load_flow(work / "shop.arbiter.flow.json"), cases


@pytest.fixture(scope="module")
def learned(shop_flow_path, tmp_path_factory):
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    return (
        learn_arbiter(shop_flow_path, first),
        learn_arbiter(shop_flow_path, second),
        first,
        second,
    )


def test_the_arbiter_is_learned_into_the_flow(learned) -> None:
    (flow, cases), _, work, _ = learned
    arbiter = flow["arbiter"]
    assert arbiter["model"] == "simulate://habit" and arbiter["tasks"] == 2
    assert len(cases) >= 4 and arbiter["cases"] == sum(c.actual is not None for c in cases)
    [fold] = arbiter["folds"]
    assert len(fold["weights"]) == 5 and all(math.isfinite(w) for w in fold["weights"])
    assert sum(s["decisions"] for s in fold["rates"]["sites"].values()) == len(cases)
    records = [json.loads(line) for line in (work / "answers.jsonl").read_text().splitlines()]
    assert len(records) == len(cases) and all(r["draw"]["key"].count("/") == 2 for r in records)


def test_the_fit_does_at_least_as_well_as_the_habit_alone(learned) -> None:
    (flow, cases), *_ = learned
    weights = flow["arbiter"]["folds"][0]["weights"]
    from stretto.oracle.arbiter import arbiter_from_json

    arbiter = arbiter_from_json(flow["arbiter"])
    fitted = [c for c in cases if c.actual is not None]
    coverage = {c.site: arbiter.folds[0].rates.coverage(c.site) for c in fitted}
    ll_fit = sum(math.log(arbiter.judge(c, c.task)[c.actual] / coverage[c.site]) for c in fitted)
    ll_habit = sum(
        math.log(max(c.habit[c.actual], 1e-6) / sum(max(c.habit[o], 1e-6) for o in c.options))
        for c in fitted
    )
    # the penalized optimum beats w = (1, 0, 0, 0, 0), whose penalty is 1/2
    assert ll_fit - 0.5 * sum(w * w for w in weights) >= ll_habit - 0.5 - 1e-9


def test_learning_twice_gives_the_same_bytes(learned) -> None:
    (flow1, _), (flow2, _), first, second = learned
    assert json.dumps(flow1["arbiter"], sort_keys=True) == json.dumps(
        flow2["arbiter"], sort_keys=True
    )
    files1 = sorted(p.relative_to(first / "cache") for p in (first / "cache").rglob("*.json"))
    files2 = sorted(p.relative_to(second / "cache") for p in (second / "cache").rglob("*.json"))
    assert files1 == files2 and files1
    for name in files1:
        assert (first / "cache" / name).read_bytes() == (second / "cache" / name).read_bytes()


def test_decisions_are_judged_from_the_cache(learned) -> None:
    (flow, cases), _, work, _ = learned
    replay = Oracle(
        open_runner("replay", replayed=flow["arbiter"]["model"]), AnswerCache(work / "cache")
    )
    episodes = {e.id: e for e in read_episodes(SHOP)}
    judged = unanswered = 0
    for session, episode in episodes.items():
        judge = ArbiterJudge(flow, replay, session=session)
        for point in decision_points(flow, episode):
            judgement = judge(
                site=point.site,
                prev=point.prev,
                lookups=point.lookups,
                habit=point.habit,
                conversation=point.conversation,
                index=point.index,
            )
            if judgement.reason is not None:
                assert judgement.reason.startswith("the System-One model failed: replay: no cached")
                assert judgement.reason != INCOMPLETE and judgement.probs == {}
                unanswered += 1
                continue
            judged += 1
            assert set(judgement.probs) == set(options_at(point.lookups))
            rates = judge.arbiter.folds[0].rates
            assert sum(judgement.probs.values()) == pytest.approx(rates.coverage(point.site))
            assert judgement.key is not None and judgement.record["cached"]
    assert judged == len(cases)  # the held-out decisions, each answered from the cache
    assert unanswered > 0  # the training sessions' decisions were never asked
