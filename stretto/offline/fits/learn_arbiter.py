"""Learning a flow's arbiter from held-out sessions (../shared/spec/algorithms.md §7 step 6,
§13): walk each held-out session as the proxy would have seen it (stretto.offline.walk), ask
the System-One model at every decision after one of the agent's calls (stretto.oracle's
SiteAsker), turn each answer and the agent's next step into a case, and fit the conditional
logit (stretto.oracle.fit) — one pooled fit (`learn`), or five cross-fitted by task group
(`compile`, unless `--pooled-arbiter`).

Before anything is asked, the uncached questions' cost is checked against the budget
(stretto.oracle.budget): over it, nothing is asked.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stretto.logs.episode import Assistant, Episode
from stretto.model.flow import habit_model
from stretto.offline.episode_judges import episode_task
from stretto.offline.walk import Point, walk
from stretto.oracle.arbiter import Arbiter, new_arbiter
from stretto.oracle.budget import Estimate, check_budget
from stretto.oracle.fit import fit_folds
from stretto.oracle.judge import SiteAsker, SiteQuestion, site_lookups
from stretto.oracle.oracle import Oracle, open_oracle, parse_price
from stretto.oracle.questions import Predicate, load_predicates
from stretto.oracle.scores import Case, actual_option, options_at
from stretto.oracle.state import Conversation
from stretto.progress import Progress

DEFAULT_BUDGET = 1.0  # dollars


@dataclass(frozen=True)
class ArbiterOptions:
    """What `learn` and `compile` take to fit an arbiter (docs/oracle.md, Options)."""

    oracle: str
    cache: str | Path | None = None
    base_url: str | None = None
    budget: float = DEFAULT_BUDGET
    price: str | None = None  # --oracle-price IN[,OUT]
    log: str | Path | None = None
    predicates: str | Path | None = None  # a predicates file
    manifest_options: bool = False
    dataflow_hints: bool = False
    pooled: bool = True

    def open(self) -> Oracle:
        return open_oracle(
            self.oracle,
            cache=self.cache,
            base_url=self.base_url,
            price=parse_price(self.price) if self.price else None,
            log=self.log,
        )

    def load_predicates(self) -> list[Predicate]:
        return load_predicates(self.predicates) if self.predicates else []


@dataclass
class Asked:
    """A held-out decision's question, and what the agent did next there."""

    asker: SiteAsker
    question: SiteQuestion
    actual: str | None  # the agent's option (None: a read the site did not offer)
    task: str


@dataclass
class Learned:
    arbiter: Arbiter
    cases: list[Case]
    estimate: Estimate
    tasks: int
    notes: list[str] = field(default_factory=list)


def _next_steps(episode: Episode) -> dict[tuple[int, int], str | None]:
    """For each of the agent's calls (by key): what the agent did next — its next call's tool
    (in the order it made them), or None for a reply or the end. The flow's own lookups are
    not the agent's steps."""
    steps: list[tuple[tuple[int, int] | None, str | None]] = []
    for event in episode.events:
        if isinstance(event, Assistant) and not event.calls:
            steps.append((None, None))
        elif isinstance(event, Assistant):
            steps += [(c.key, c.name) for c in event.calls if not c.by_proxy]
    return {
        key: steps[i + 1][1] if i + 1 < len(steps) else None
        for i, (key, _) in enumerate(steps)
        if key is not None
    }


def decisions(
    flow: dict,
    episode: Episode,
    oracle: Oracle,
    predicates: Sequence[Predicate],
    *,
    manifest_options: bool = False,
    dataflow_hints: bool = False,
) -> Iterator[Asked]:
    """The questions of a held-out session: one after each of the agent's calls whose site
    offers lookups, numbered in order (the draw's index)."""
    habit = habit_model(flow)
    asker = SiteAsker(flow, oracle, session=episode.id, predicates=predicates, hints=dataflow_hints)
    reads = flow["sites"]["reads"]
    following = _next_steps(episode)
    task = episode_task(episode)
    conversation = Conversation()
    index = 0
    for point in walk(episode, None, transcript=conversation):
        if not isinstance(point, Point) or point.by_proxy:
            continue
        tool, failed = point.last
        lookups = site_lookups(flow, tool, failed, manifest_options)
        if not lookups:
            continue
        history = point.view.history
        question = asker.question(
            site=tool + (" (error)" if failed else ""),
            prev=tool,
            lookups=lookups,
            habit={t: habit.prob(t, history) for t in lookups},
            conversation=conversation,
            index=index,
        )
        index += 1
        actual = actual_option(following.get(point.result.call_key), options_at(lookups), reads)
        yield Asked(asker, question, actual, task)


def learn_arbiter(flow: dict, held_out: Sequence[Episode], options: ArbiterOptions) -> Learned:
    """Ask the held-out sessions' decisions and fit the flow's arbiter. BudgetError before
    anything is asked when the uncached questions could cost more than the budget;
    ValueError when there is nothing to fit on."""
    oracle = options.open()
    predicates = options.load_predicates()
    asked = [
        a
        for episode in held_out
        for a in decisions(
            flow,
            episode,
            oracle,
            predicates,
            manifest_options=options.manifest_options,
            dataflow_hints=options.dataflow_hints,
        )
    ]
    estimate = check_budget(
        oracle, [(a.question.request, a.question.context) for a in asked], options.budget
    )
    progress = Progress(len(asked), f"asking {oracle.model}", " decisions")
    cases = []
    try:
        for a in asked:
            answer = a.asker.ask(a.question)
            if answer.complete:
                cases.append(a.asker.case(a.question, answer, a.actual, a.task))
            progress.advance()
    finally:
        progress.close()
    if not cases:
        raise ValueError(
            f"no decisions to fit the arbiter on: the {len(held_out)} held-out sessions offered "
            "no lookup after any of the agent's calls"
            if not asked
            else "no decisions to fit the arbiter on: no answer was complete"
        )
    tasks = len({episode_task(e) for e in held_out})
    arbiter = new_arbiter(
        model=oracle.model,
        folds=fit_folds(cases, predicates, pooled=options.pooled),
        predicates=predicates,
        dataflow_hints=options.dataflow_hints,
        manifest_options=options.manifest_options,
        tasks=tasks,
    )
    notes = []
    incomplete = len(asked) - len(cases)
    if incomplete:
        notes.append(f"{incomplete} of {len(asked)} answers were incomplete; left out")
    return Learned(arbiter, cases, estimate, tasks, notes)
