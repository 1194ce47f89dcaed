"""A question set for one decision, as every runner receives it, and its answers.

The canonical form of a request is the System-One wire shape (`{model, state, questions}`,
choice questions with `criteria` = option -> description, yes/no questions as `noul` with
`criteria` = {true, false}); its serialization (keys sorted, compact, UTF-8 kept) is hashed
for the answer cache's key. Answers, whatever the runner, are normalized to
`{question id: {option: probability}}` (a yes/no question's options are `yes` and `no`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stretto.oracle.errors import Malformed

YES, NO = "yes", "no"
Answers = dict[str, dict[str, float]]
PROB_SLACK = 1e-6  # a probability a hair outside [0, 1] (rounding) is clamped, not refused


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    options: tuple[tuple[str, str], ...]  # (option, description), sorted by option
    yes_no: bool = False

    @staticmethod
    def choice(qid: str, text: str, options: Mapping[str, str]) -> Question:
        return Question(qid, text, tuple(sorted(options.items())))

    @staticmethod
    def yes_or_no(qid: str, text: str, yes: str, no: str) -> Question:
        return Question(qid, text, ((NO, no), (YES, yes)), yes_no=True)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.options]

    def description(self, option: str) -> str:
        return dict(self.options)[option]

    def wire(self) -> dict:
        """The question in System-One form (noul for yes/no)."""
        if self.yes_no:
            return {
                "type": "noul",
                "instructions": self.text,
                "criteria": {"true": self.description(YES), "false": self.description(NO)},
            }
        return {"type": "choice", "instructions": self.text, "criteria": dict(self.options)}


@dataclass(frozen=True)
class Request:
    state: Mapping[str, Any]
    questions: tuple[Question, ...]

    def question(self, qid: str) -> Question:
        for question in self.questions:
            if question.id == qid:
                return question
        raise KeyError(qid)

    def wire(self, model: str, draw: str | None = None) -> dict:
        """The canonical request: what is hashed for the cache. A runner that draws adds the
        draw's key, so two decisions never share a drawn answer."""
        wire = {
            "model": model,
            "state": self.state,
            "questions": {q.id: q.wire() for q in self.questions},
        }
        if draw is not None:
            wire["draw"] = draw
        return wire


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def cache_key(wire: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the serialized request."""
    return hashlib.sha256(canonical(wire).encode()).hexdigest()


def probability(value: Any, where: str) -> float:
    """A probability from an answer, or Malformed: a number (not a bool) in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Malformed(f"{where}: expected a probability, got {json.dumps(value)[:60]}")
    if value < -PROB_SLACK or value > 1 + PROB_SLACK:
        raise Malformed(f"{where}: {value} is not a probability")
    return min(1.0, max(0.0, float(value)))


def choice_probabilities(
    question: Question, probs: Any, where: str, normalize: bool = False
) -> dict[str, float]:
    """Every option's probability from an answer's `{option: p}` (a missing option is 0; an
    option that was not offered is refused). `normalize` rescales stated probabilities."""
    if not isinstance(probs, dict):
        raise Malformed(f"{where}: expected an object of option -> probability")
    unknown = sorted(set(probs) - set(question.names))
    if unknown:
        raise Malformed(f"{where}: `{unknown[0]}` is not one of the options offered")
    out = {}
    for name in question.names:
        value = probs.get(name, 0.0)
        # the common case checked inline; anything else by probability(), which says why
        ok = type(value) is float and 0.0 <= value <= 1.0
        out[name] = value if ok else probability(value, f"{where}.{name}")
    if normalize:
        total = sum(out.values())
        if total <= 0:
            raise Malformed(f"{where}: every option has probability 0")
        out = {name: p / total for name, p in out.items()}
    return out


def yes_no(p_yes: float) -> dict[str, float]:
    return {NO: 1.0 - p_yes, YES: p_yes}


def complete(request: Request, answers: Answers) -> bool:
    """Whether every question was answered."""
    return all(q.id in answers for q in request.questions)


def top(answer: Mapping[str, float]) -> tuple[str | None, float | None]:
    """The most probable option (first of equals, in option order) and its probability."""
    best, best_p = None, None
    for name, p in answer.items():
        if best_p is None or p > best_p:
            best, best_p = name, p
    return best, best_p
