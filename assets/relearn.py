"""A domain's flow as the `flow` asset learns it, where the warehouse and the offline rules
meet: the habit from the warehouse's sessions (warehouse.counts.learn.learn_domain), then the
arbiter, fitted on the held-out tasks' sessions (stretto.offline.fits.learn_arbiter) or taken from
another flow, and the surprise gate, cross-fitted on the same sessions (stretto.offline.fits.gate).

It lives in assets/ because warehouse/ and stretto/offline/ never import each other
(docs/architecture.md): an asset or a command joins them. It imports no dagster, so it takes
plain options and says what happens through `say` and `warn`; the asset turns its result and
its errors into Dagster's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stretto.logs.episode import read_episode
from stretto.offline.fits.gate import learn_gate
from stretto.offline.fits.learn_arbiter import ArbiterOptions, learn_arbiter
from stretto.oracle.arbiter import take_arbiter
from stretto.oracle.errors import OracleError
from stretto.oracle.split import learn_split
from warehouse.counts.learn import (
    HabitOptions,
    learn_domain,
    learner,
    sessions_by_task,
    warehouse_episodes,
)
from warehouse.layout import Layout


@dataclass(frozen=True)
class ArbiterPlan:
    """Where the flow's arbiter comes from: taken from the flow file `taken_from`, else fitted
    with `fit` on the sessions of the held-out tasks (`held_out_tasks`, default 30% of them by
    stretto.oracle.split.learn_split), the habit learned from the others (with `refit_habit`,
    from every session again after the fit)."""

    fit: ArbiterOptions
    taken_from: str | None = None
    held_out_tasks: list[str] | None = None
    refit_habit: bool = False


@dataclass(frozen=True)
class GatePlan:
    """The surprise gate: learned at this quantile of the surprise, over `window` steps."""

    quantile: float
    window: int


class ArbiterFailed(RuntimeError):
    """The arbiter could not be had (its file, the split, the oracle's budget or runner):
    one line."""


def learn_domain_flow(
    layout: Layout,
    domain: str,
    habit: HabitOptions,
    arbiter: ArbiterPlan | None = None,
    gate: GatePlan | None = None,
    say: Callable[[str], None] = lambda message: None,
    warn: Callable[[str], None] = lambda message: None,
) -> dict:
    """The `domain` flow learned from the warehouse: its habit, with `arbiter` an arbiter,
    with `gate` a surprise gate. Raises warehouse.counts.learn.LearnError (nothing to learn from),
    ArbiterFailed, stretto.offline.fits.gate.GateError (too few or too short sessions)."""
    if arbiter is None:
        learned = learn_domain(layout, domain, habit, say=say, warn=warn)  # warn: unmerged logs
    else:
        learned = _with_arbiter(layout, domain, habit, arbiter, say, warn)
    if gate is not None:
        learn = learner(
            layout,
            domain,
            manifest=habit.manifest,
            only_domain=habit.only_domain,
            rewards=habit.rewards,
            half_life=habit.half_life,
        )
        only = domain if habit.only_domain else None
        episodes = warehouse_episodes(layout, only, habit.rewards)
        learned["surprise"] = learn_gate(episodes, learn, gate.quantile, gate.window)
    return learned


def _with_arbiter(
    layout: Layout,
    domain: str,
    habit: HabitOptions,
    plan: ArbiterPlan,
    say: Callable[[str], None],
    warn: Callable[[str], None],
) -> dict:
    """The arbiter step (../shared/spec/algorithms.md §7 steps 3 and 6): taken from a file with
    the habit from every session, or fitted on the held-out tasks' decisions."""
    if plan.taken_from:
        source = Path(plan.taken_from)
        try:
            taken = take_arbiter(json.loads(source.read_text()), str(source))
        except OSError as exc:
            raise ArbiterFailed(f"{source}: cannot read: {exc.strerror or exc}") from None
        except ValueError as exc:  # not JSON, or not an arbiter (ArbiterError names the field)
            raise ArbiterFailed(str(exc) if "field" in str(exc) else f"{source}: {exc}") from None
        learned = learn_domain(layout, domain, habit)
        learned["arbiter"] = taken.to_json()
        return learned
    sessions = sessions_by_task(layout, domain, habit.only_domain)
    tasks = [task for _, task, _ in sessions]
    if plan.held_out_tasks is not None:
        held_tasks = set(plan.held_out_tasks) & set(tasks)
        train_tasks = set(tasks) - held_tasks
    else:
        try:
            training, held_out = learn_split(tasks)
        except ValueError as exc:
            raise ArbiterFailed(f"the {domain} arbiter: {exc}") from None
        train_tasks, held_tasks = set(training), set(held_out)
    train = {s for s, task, _ in sessions if task in train_tasks}
    learned = learn_domain(layout, domain, habit, sessions=train)
    episodes = [read_episode(file) for _, task, file in sessions if task in held_tasks]
    try:
        fitted = learn_arbiter(learned, episodes, plan.fit)
    except (OracleError, ValueError) as exc:  # the budget, a runner's failure, nothing to fit
        raise ArbiterFailed(f"the {domain} arbiter: {exc}") from None
    for note in fitted.notes:
        warn(note)
    say(
        f"fitted the {domain} arbiter on {fitted.arbiter.cases} decisions of {fitted.tasks} "
        f"held-out tasks ({fitted.estimate.uncached} of {fitted.estimate.questions} question "
        f"sets asked of {fitted.arbiter.model}, the rest from the cache)"
    )
    if plan.refit_habit:
        learned = learn_domain(layout, domain, habit)
    learned["arbiter"] = fitted.arbiter.to_json()
    return learned
