"""Choosing on the training episodes (bench/quality_dev.py, issue 42): every part is replayed
by a flow that never saw its tasks — nor, where several agents trained, its agent — and every
training episode is judged exactly once; the test episodes are never read."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from bench import quality as q
from bench import quality_dev as dev
from stretto.vocabulary import fold_of


def check_parts(domain: q.Domain, by_agent: bool) -> list[q.Domain]:
    parts = dev.dev_splits(domain)
    tested = Counter(e.id for part in parts for _, e in part.test)
    # every training episode judged once (a fold with nothing to learn from would be left out)
    assert tested == Counter(e.id for e in domain.train)
    # never a test-task episode
    assert not set(tested) & {e.id for _, e in domain.test}
    for part in parts:
        held = [e for _, e in part.test]
        folds = {fold_of(e.task_id) for e in held}
        assert len(folds) == 1
        # learned from other folds' tasks only, failed episodes (the calibration's) included
        assert all(fold_of(e.task_id) not in folds for e in part.train)
        learned = q.calibration_episodes(part, part.train_ok)
        assert not {e.task_id for e in learned} & {e.task_id for e in held}
        # and from no episode of the logs it writes but its own training ones
        kept = {s.session for r in part.results for s in r.simulations}
        assert kept == {e.id for e in part.train}
        agents = {q.agent_key(e.agent_model) for e in held}
        assert len(agents) == 1
        if by_agent:
            assert not agents & {q.agent_key(e.agent_model) for e in part.train}
    # each part's flows are cached apart (the cache key is what they were learned from)
    assert len({part.scope for part in parts}) == len(parts)
    return parts


def test_one_training_agent_is_cut_by_task_fold_only(retail: q.Domain) -> None:
    parts = check_parts(retail, by_agent=False)
    assert len(parts) >= 2
    assert all(part.scope and part.scope.endswith("-all") for part in parts)


def test_several_training_agents_are_cut_by_task_fold_and_agent(retail: q.Domain) -> None:
    # half of the training episodes relabelled to a second agent
    train = [
        replace(e, agent_model="gpt-4o-2024-11-20") if i % 2 else e
        for i, e in enumerate(retail.train)
    ]
    two = replace(retail, train=train)
    parts = check_parts(two, by_agent=True)
    assert {q.agent_key(e.agent_model) for part in parts for _, e in part.test} == {
        "gpt-4.1-mini",
        "gpt-4o",
    }
