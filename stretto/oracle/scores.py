"""From a System-One answer to the arbiter's inputs (../shared/spec/algorithms.md §13.2–13.4):
the scores an answer gives each option, the case features, the rates a fold keeps, and the
judgement P(option). Pure Python: the proxy judges with it and starts without numpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from stretto.oracle.questions import GO_ON, NEXT, PREDICATE_PREFIX, TOOL, Predicate
from stretto.oracle.request import YES, Answers
from stretto.vocabulary import FLOOR, RESPOND

PREDICATE_CLAMP = 1e-4  # a yes-probability is clamped to [1e-4, 1 - 1e-4] before its logit
PRIOR_DECISIONS = 10  # a site's rates are shrunk towards the overall ones by this many
BASE_FEATURES = ("ln habit", "ln one question", "ln split", "hand back")
RELIABILITY = "reliability"


def options_at(lookups: Iterable[str]) -> list[str]:
    """The options of a decision: the lookups and `respond`, in sorted name order."""
    return sorted({*lookups, RESPOND})


def habit_prior(habit: Mapping[str, float], lookups: Iterable[str]) -> dict[str, float]:
    """Each lookup's habit probability; `respond` gets what is left (everything the flow
    cannot do counts as handing back)."""
    out = {tool: habit[tool] for tool in lookups}
    out[RESPOND] = max(0.0, 1.0 - sum(out.values()))
    return {name: out[name] for name in options_at(out)}


def one_question(answers: Answers, options: Sequence[str]) -> dict[str, float]:
    """The `next` answer's probability of each option (missing: 0)."""
    answer = answers.get(NEXT, {})
    return {o: answer.get(o, 0.0) for o in options}


def split_question(answers: Answers, options: Sequence[str]) -> dict[str, float]:
    """`respond` = 1 − P(go on); a lookup = P(go on) × its share in `tool` (all of it at a
    one-lookup site)."""
    go_on = answers.get(GO_ON, {}).get(YES, 0.0)
    lookups = [o for o in options if o != RESPOND]
    out = {}
    for option in options:
        if option == RESPOND:
            out[option] = 1.0 - go_on
        elif len(lookups) == 1:
            out[option] = go_on
        else:
            out[option] = go_on * answers.get(TOOL, {}).get(option, 0.0)
    return out


def predicate_answers(answers: Answers, predicates: Iterable[Predicate]) -> dict[str, float]:
    """P(yes) of each predicate answered."""
    out = {}
    for predicate in predicates:
        answer = answers.get(PREDICATE_PREFIX + predicate.id)
        if answer is not None:
            out[predicate.id] = answer.get(YES, 0.0)
    return out


def model_pick(answers: Answers, options: Sequence[str]) -> str:
    """The model's `next` choice: its likeliest option (first of equals), else respond."""
    answer = one_question(answers, options)
    best = max(options, key=lambda o: answer[o], default=RESPOND)
    return best if answer.get(best, 0.0) > 0 else RESPOND


def actual_option(
    next_tool: str | None, options: Sequence[str], reads: Iterable[str]
) -> str | None:
    """What the agent did next, as an option: the lookup it made when offered; `respond` for
    anything the flow could not do (a reply, a write, the end); None for a read the site does
    not offer (the options did not cover it)."""
    if next_tool is None:
        return RESPOND
    if next_tool in options:
        return next_tool
    return None if next_tool in set(reads) else RESPOND


def _logit(p: float, clamp: float) -> float:
    p = min(1.0 - clamp, max(clamp, p))
    return math.log(p / (1.0 - p))


@dataclass
class Case:
    """One decision the arbiter learns from or judges."""

    site: str
    prev: str  # the tool of the call the decision follows
    options: list[str]  # sorted, respond included
    habit: dict[str, float]
    one: dict[str, float]
    split: dict[str, float]
    predicates: dict[str, float]
    pick: str
    actual: str | None = None  # the agent's option (None: not covered); unknown when judging
    task: str = ""

    @property
    def fittable(self) -> bool:
        return self.actual is not None


def make_case(
    *,
    site: str,
    prev: str,
    lookups: Iterable[str],
    habit: Mapping[str, float],
    answers: Answers,
    predicates: Iterable[Predicate] = (),
    actual: str | None = None,
    task: str = "",
) -> Case:
    """A case from a decision's habit probabilities (of each lookup, or of every option) and
    the model's answers."""
    lookups = sorted(set(lookups))
    options = options_at(lookups)
    return Case(
        site=site,
        prev=prev,
        options=options,
        habit=habit_prior(habit, lookups),
        one=one_question(answers, options),
        split=split_question(answers, options),
        predicates=predicate_answers(answers, predicates),
        pick=model_pick(answers, options),
        actual=actual,
        task=task,
    )


def features(case: Case, weighed: Sequence[Predicate]) -> list[list[float]]:
    """Per option: ln habit, ln one-question, ln split, hand-back indicator, and per weighed
    predicate logit(P(yes)) where it favours the option (else 0)."""
    rows = []
    for option in case.options:
        row = [
            math.log(max(case.habit[option], FLOOR)),
            math.log(max(case.one[option], FLOOR)),
            math.log(max(case.split[option], FLOOR)),
            1.0 if option == RESPOND else 0.0,
        ]
        for predicate in weighed:
            p = case.predicates.get(predicate.id)
            favours = p is not None and predicate.favors_option(option, case.prev)
            row.append(_logit(p, PREDICATE_CLAMP) if p is not None and favours else 0.0)
        rows.append(row)
    return rows


def feature_names(weighed: Sequence[Predicate]) -> list[str]:
    return [*BASE_FEATURES, *(PREDICATE_PREFIX + p.id for p in weighed), RELIABILITY]


@dataclass
class Rates:
    """How often the model's pick was the agent's step, and how often the agent's step was
    an option at all, per site (decisions, agreed, covered) and overall."""

    sites: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    agree: float = 0.5
    cover: float = 1.0

    @staticmethod
    def of(cases: Iterable[Case]) -> Rates:
        sites: dict[str, list[int]] = {}
        for case in cases:
            counts = sites.setdefault(case.site, [0, 0, 0])
            counts[0] += 1
            counts[1] += int(case.actual is not None and case.actual == case.pick)
            counts[2] += int(case.actual is not None)
        n = sum(c[0] for c in sites.values())
        agreed = sum(c[1] for c in sites.values())
        covered = sum(c[2] for c in sites.values())
        return Rates(
            {site: (c[0], c[1], c[2]) for site, c in sorted(sites.items())},
            agreed / n if n else 0.5,
            covered / n if n else 1.0,
        )

    def reliability(self, site: str) -> float:
        n, agreed, _ = self.sites.get(site, (0, 0, 0))
        return (agreed + PRIOR_DECISIONS * self.agree) / (n + PRIOR_DECISIONS)

    def coverage(self, site: str) -> float:
        n, _, covered = self.sites.get(site, (0, 0, 0))
        return (covered + PRIOR_DECISIONS * self.cover) / (n + PRIOR_DECISIONS)

    def to_json(self) -> dict:
        return {
            "agree": self.agree,
            "cover": self.cover,
            "sites": {
                site: {"decisions": n, "agreed": a, "covered": c}
                for site, (n, a, c) in sorted(self.sites.items())
            },
        }

    @staticmethod
    def from_json(value: Mapping) -> Rates:
        return Rates(
            {
                site: (int(v["decisions"]), int(v["agreed"]), int(v["covered"]))
                for site, v in value["sites"].items()
            },
            float(value["agree"]),
            float(value["cover"]),
        )


def design(case: Case, weighed: Sequence[Predicate], rates: Rates) -> list[list[float]]:
    """The case's features with the reliability feature appended: logit of the site's
    reliability on the model's pick, 0 elsewhere."""
    reliability = _logit(rates.reliability(case.site), PREDICATE_CLAMP)
    return [
        [*row, reliability if option == case.pick else 0.0]
        for option, row in zip(case.options, features(case, weighed), strict=True)
    ]


def judge(
    case: Case, weights: Sequence[float], weighed: Sequence[Predicate], rates: Rates
) -> dict[str, float]:
    """P(option) = softmax(w·x) × the site's coverage, for every option (respond included)."""
    rows = design(case, weighed, rates)
    if len(weights) != len(rows[0]):
        raise ValueError(f"{len(weights)} weights for {len(rows[0])} features")
    scores = [sum(w * x for w, x in zip(weights, row, strict=True)) for row in rows]
    peak = max(scores)
    exps = [math.exp(s - peak) for s in scores]
    total = sum(exps)
    coverage = rates.coverage(case.site)
    return {o: e / total * coverage for o, e in zip(case.options, exps, strict=True)}
