"""`simulate://random` and `simulate://habit`: no model, seeded draws — for tests, benchmarks
and dry runs. Every draw is seeded by the decision's draw key (flow, session, decision index),
so a re-run draws the same.

`random`: each question's answer is a uniformly drawn distribution over its options (flat
Dirichlet). `habit`: the `next` choice is drawn from the flow's habit; the answer puts half its
mass on that choice and half on the habit; `go_on` and `tool` follow from it; predicates
are answered yes with a uniformly drawn probability.
"""

from __future__ import annotations

import math

from stretto.model.decide import SplitMix64
from stretto.oracle.errors import OracleError, UnknownRunner
from stretto.oracle.questions import GO_ON, NEXT, TOOL
from stretto.oracle.request import Answers, Request, canonical, yes_no
from stretto.oracle.runners.base import Context, Reply, Runner
from stretto.vocabulary import RESPOND, fnv1a64

KINDS = ("random", "habit")
BELIEF = 0.5  # the share of a simulated answer on the drawn choice


class SimulateRunner(Runner):
    scheme = "simulate"
    draws = True

    def __init__(self, model, options=None) -> None:
        if model not in KINDS:
            raise UnknownRunner(
                f"--oracle simulate://{model}: expected simulate://random or simulate://habit"
            )
        super().__init__(model, options)

    def ask(self, request: Request, context: Context) -> Reply:
        if context.draw is None:
            raise OracleError(f"{self.uri}: no draw key (flow/session/decision) to seed the draw")
        rng = SplitMix64(fnv1a64(context.draw))
        first = rng.uniform()
        if self.model == "random":
            answers = _random(request, rng, first)
        else:
            if context.habit is None:
                raise OracleError(f"{self.uri}: no habit probabilities to draw from")
            answers = _habit(request, rng, first, context.habit)
        return Reply(answers, canonical(request.wire(self.uri, context.draw)), u=first)

    def check(self) -> str:
        return "no model: seeded draws"


def _random(request: Request, rng: SplitMix64, first: float) -> Answers:
    answers: Answers = {}
    uniforms = _stream(rng, first)
    for question in request.questions:
        # -ln(1 - u) is an exponential draw; normalized, a flat Dirichlet draw
        weights = [max(-math.log(1.0 - next(uniforms)), 1e-12) for _ in question.names]
        total = sum(weights)
        answers[question.id] = {o: w / total for o, w in zip(question.names, weights, strict=True)}
    return answers


def _stream(rng: SplitMix64, first: float):
    yield first
    while True:
        yield rng.uniform()


def _habit(request: Request, rng: SplitMix64, first: float, habit) -> Answers:
    answers: Answers = {}
    options = request.question(NEXT).names
    prior = {o: max(0.0, float(habit.get(o, 0.0))) for o in options}
    total = sum(prior.values())
    prior = (
        {o: p / total for o, p in prior.items()}
        if total > 0
        else dict.fromkeys(options, 1.0 / len(options))
    )
    drawn, left = options[-1], first
    for option in options:
        left -= prior[option]
        if left < 0:
            drawn = option
            break
    nxt = {o: BELIEF * (o == drawn) + (1 - BELIEF) * prior[o] for o in options}
    for question in request.questions:
        if question.id == NEXT:
            answers[NEXT] = nxt
        elif question.id == GO_ON:
            answers[GO_ON] = yes_no(1.0 - nxt.get(RESPOND, 0.0))
        elif question.id == TOOL:
            mass = {o: nxt.get(o, 0.0) for o in question.names}
            total = sum(mass.values())
            answers[TOOL] = (
                {o: m / total for o, m in mass.items()}
                if total > 0
                else dict.fromkeys(question.names, 1.0 / len(question.names))
            )
        else:
            answers[question.id] = yes_no(rng.uniform())
    return answers
