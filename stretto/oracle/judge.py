"""Where a decision meets the System-One model: the questions at a site are asked (or looked
up) and turned into a case — to learn from (`SiteAsker`, used by learn/compile), or judged by
the flow's arbiter into P(option) (`ArbiterJudge`, what the Decider calls for the `arbiter`
decider; ../shared/spec/algorithms.md §6.1 step 6)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stretto.oracle.arbiter import Arbiter, arbiter_from_json
from stretto.oracle.errors import OracleError, TimedOut, Unanswered
from stretto.oracle.oracle import Asked, Oracle, draw_key, flow_digest
from stretto.oracle.questions import Predicate, dataflow_hints, site_request
from stretto.oracle.request import Request
from stretto.oracle.runners.base import Context
from stretto.oracle.scores import Case, habit_prior, make_case
from stretto.oracle.state import Conversation

FAILED = "the System-One model failed: {error}"
INCOMPLETE = "the System-One answer was incomplete"


def site_lookups(flow: dict, after: str, failed: bool, manifest_options: bool = False) -> list:
    """The lookups offered after a call: those that followed it in training, or every read
    tool (`--manifest-options`)."""
    if manifest_options:
        return sorted(flow["sites"]["reads"])
    for site in flow["sites"]["next"]:
        if site["after"] == after and site["failed"] == failed:
            return sorted(site["lookups"])
    return []


@dataclass
class SiteQuestion:
    """One decision's question set, ready to ask: the request and its context."""

    request: Request
    context: Context
    site: str
    prev: str
    lookups: list[str]
    habit: dict[str, float]


class SiteAsker:
    """Builds and asks the questions of a flow's decisions in one session."""

    def __init__(
        self,
        flow: dict,
        oracle: Oracle,
        *,
        session: str,
        predicates: Iterable[Predicate] = (),
        hints: bool = False,
    ) -> None:
        self.oracle = oracle
        self.session = session
        self.predicates = list(predicates)
        self.docs = flow["manifest"].get("docs", {})
        self.hints = dataflow_hints(flow["bindings"]) if hints else None
        self.digest = flow_digest(flow)

    def question(
        self,
        *,
        site: str,
        prev: str,
        lookups: Iterable[str],
        habit: Mapping[str, float],
        conversation: Conversation,
        index: int,
    ) -> SiteQuestion:
        """The question set of the session's `index`-th decision at `site` (after the call
        `prev`), offering `lookups`; `habit` the habit's probability of each lookup."""
        lookups = sorted(set(lookups))
        request = site_request(
            conversation.slice(), lookups, self.docs, self.predicates, self.hints
        )
        prior = habit_prior(habit, lookups)
        context = Context(draw_key(self.digest, self.session, index), prior)
        return SiteQuestion(request, context, site, prev, lookups, prior)

    def ask(self, question: SiteQuestion) -> Asked:
        return self.oracle.ask(question.request, question.context)

    def case(self, question: SiteQuestion, asked: Asked, actual: str | None, task: str) -> Case:
        return make_case(
            site=question.site,
            prev=question.prev,
            lookups=question.lookups,
            habit=question.habit,
            answers=asked.answers,
            predicates=self.predicates,
            actual=actual,
            task=task,
        )


@dataclass
class Judgement:
    """The arbiter's probabilities of every option (respond included), or why it hands back."""

    probs: dict[str, float] = field(default_factory=dict)
    reason: str | None = None
    oracle: dict[str, float] = field(default_factory=dict)  # the model's `next` answer
    predicates: dict[str, float] = field(default_factory=dict)
    key: str | None = None  # the request's cache key (null when nothing was asked)
    record: dict | None = None
    unanswered: bool = False  # `replay` had no answer: offline tools leave the decision out


class ArbiterJudge:
    """What the Decider calls at an `arbiter` decision of one session. Its decisions are
    numbered in the order they are asked (`asked`: the next one's index, which seeds a
    drawing runner), so a session walked again asks the same questions."""

    def __init__(
        self,
        flow: dict,
        oracle: Oracle,
        *,
        session: str,
        task: str | None = None,
        arbiter: Arbiter | None = None,
    ) -> None:
        self.arbiter: Arbiter = arbiter or arbiter_from_json(flow["arbiter"])
        self.asker = SiteAsker(
            flow,
            oracle,
            session=session,
            predicates=self.arbiter.predicates,
            hints=self.arbiter.dataflow_hints,
        )
        self.task = task or session
        self.asked = 0

    def on(self, view: Any, within: float | None = None) -> functools.partial[Judgement]:
        """This judge as the Decider takes it, showing the model the session a SessionView
        holds (its `transcript`, a Conversation); `within`: seconds the question may take."""
        return functools.partial(self, conversation=view.transcript, within=within)

    def __call__(
        self,
        *,
        site: str,
        prev: str,
        lookups: Iterable[str],
        habit: Mapping[str, float],
        conversation: Conversation,
        index: int | None = None,
        within: float | None = None,
    ) -> Judgement:
        """Ask the decision's questions (the session's next index unless given) and judge
        the answer. `within`: the question is asked on a thread of its own and given up
        after this many seconds (a socket's timeout holds per read, not per answer)."""
        if index is None:
            index = self.asked
        self.asked += 1
        question = self.asker.question(
            site=site,
            prev=prev,
            lookups=lookups,
            habit=habit,
            conversation=conversation,
            index=index,
        )
        key = self.asker.oracle.key(question.request, question.context)
        try:
            if within is None or self.asker.oracle.cached(question.request, question.context):
                asked = self.asker.ask(question)
            else:
                asked = _ask_within(self.asker, question, within)
        except OracleError as exc:
            return Judgement(
                reason=FAILED.format(error=exc), key=key, unanswered=isinstance(exc, Unanswered)
            )
        if not asked.complete:
            return Judgement(reason=INCOMPLETE, key=key, record=asked.record)
        case = self.asker.case(question, asked, None, self.task)
        return Judgement(
            probs=self.arbiter.judge(case, self.task),
            oracle=case.one,
            predicates=case.predicates,
            key=asked.key,
            record=asked.record,
        )


def _ask_within(asker: SiteAsker, question: SiteQuestion, seconds: float) -> Asked:
    """Ask on a thread and wait at most `seconds` for the answer (the thread runs on and
    caches what comes; the decision does not wait for it)."""
    if seconds <= 0:
        raise TimedOut(f"{asker.oracle.model}: no time left for questions in this run")
    box: dict[str, Any] = {}

    def ask() -> None:
        try:
            box["asked"] = asker.ask(question)
        except OracleError as exc:
            box["error"] = exc
        except Exception as exc:  # noqa: BLE001 - a runner's bug is this question's failure
            box["error"] = OracleError(f"{asker.oracle.model}: {exc.__class__.__name__}: {exc}")

    thread = threading.Thread(target=ask, name="oracle-question", daemon=True)
    thread.start()
    thread.join(max(0.0, seconds))
    if thread.is_alive():
        raise TimedOut(f"{asker.oracle.model}: no answer within {seconds * 1000:.0f} ms")
    if "error" in box:
        raise box["error"]
    return box["asked"]
