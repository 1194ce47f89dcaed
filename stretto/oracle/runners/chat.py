"""Asking a chat model (ollama:// chat models, claude://, openai://) the questions of a
System-One request: one prompt, and an answer constrained by a JSON schema.

Two answer shapes. `weigh`: for each question, a probability per option (normalized; chat
models without token probabilities state them). `pick`: for each question, one option; the
probabilities then come from the server's token log-probabilities where it gives them (the
first token of each answer, its alternatives split among the options they begin), else the
pick gets probability 1.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from stretto.oracle.errors import Malformed
from stretto.oracle.request import Answers, Question, Request, choice_probabilities

SYSTEM = (
    "You predict the next step of an AI agent that serves a customer with tools. You are "
    "shown the state of its session and questions about what the agent does next. Answer "
    "every question, only with the JSON asked for."
)
WEIGH_TASK = (
    "Answer each question with the probability of each of its options (numbers from 0 to 1 "
    "that sum to 1 for the question)."
)
PICK_TASK = "Answer each question with the one option the agent most likely takes."


def prompt(request: Request, task: str) -> str:
    questions = {q.id: {"question": q.text, "options": dict(q.options)} for q in request.questions}
    return (
        "State of the session:\n"
        + json.dumps(request.state, ensure_ascii=False, sort_keys=True)
        + "\n\nQuestions:\n"
        + json.dumps(questions, ensure_ascii=False, sort_keys=True)
        + "\n\n"
        + task
    )


def _object(properties: dict, required: Sequence[str]) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def weigh_schema(request: Request) -> dict:
    return _object(
        {
            q.id: _object(
                {name: {"type": "number", "minimum": 0, "maximum": 1} for name in q.names},
                q.names,
            )
            for q in request.questions
        },
        [q.id for q in request.questions],
    )


def pick_schema(request: Request) -> dict:
    return _object(
        {q.id: {"type": "string", "enum": q.names} for q in request.questions},
        [q.id for q in request.questions],
    )


def parse_json_text(text: Any, label: str) -> dict:
    if not isinstance(text, str):
        raise Malformed(f"{label}: the answer has no text")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise Malformed(f"{label}: the answer is not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise Malformed(f"{label}: the answer is not a JSON object")
    return value


def read_weighed(request: Request, value: Any, label: str) -> Answers:
    """Stated probabilities, each question's normalized to sum to 1."""
    if not isinstance(value, dict):
        raise Malformed(f"{label}: the answer is not a JSON object")
    return {
        q.id: choice_probabilities(q, value[q.id], f"{label}: {q.id}", normalize=True)
        for q in request.questions
        if q.id in value
    }


def read_picked(request: Request, value: dict, label: str) -> dict[str, str]:
    picks = {}
    for q in request.questions:
        if q.id not in value:
            continue
        pick = value[q.id]
        if not isinstance(pick, str) or pick not in q.names:
            raise Malformed(f"{label}: {q.id}: {json.dumps(pick)[:60]} is not one of the options")
        picks[q.id] = pick
    return picks


Token = tuple[str, float, list[tuple[str, float]]]  # text, log-probability, alternatives


def _first_token_distribution(
    question: Question, content: str, tokens: Sequence[Token]
) -> dict[str, float] | None:
    """The distribution over the options read from the token where the answer's value starts:
    each alternative token's probability goes to the options it begins (split evenly when it
    begins several). None when the tokens do not spell the content or say nothing."""
    match = re.search(r'"' + re.escape(question.id) + r'"\s*:\s*"', content)
    if match is None or "".join(t[0] for t in tokens) != content:
        return None
    start = match.end()
    position = 0
    for token in tokens:
        if position <= start < position + len(token[0]):
            break
        position += len(token[0])
    else:
        return None
    text, logprob, alternatives = token
    prefix = content[position:start]  # what the token holds before the value (e.g. `"`)
    mass = dict.fromkeys(question.names, 0.0)
    seen: set[str] = set()
    for candidate, lp in [*alternatives, (text, logprob)]:
        if candidate in seen or not candidate.startswith(prefix):
            continue
        seen.add(candidate)
        rest = candidate[len(prefix) :]
        if not rest:
            continue
        begun = [o for o in question.names if o.startswith(rest) or rest.startswith(o + '"')]
        for option in begun:
            mass[option] += math.exp(lp) / len(begun)
    total = sum(mass.values())
    return {o: m / total for o, m in mass.items()} if total > 0 else None


def picked_answers(
    request: Request, content: str | None, tokens: Sequence[Token] | None, label: str
) -> tuple[Answers, bool]:
    """(answers, whether token probabilities were used) for a `pick` answer."""
    if content is None:
        raise Malformed(f"{label}: the answer has no text")
    picks = read_picked(request, parse_json_text(content, label), label)
    answers: Answers = {}
    used = False
    for q in request.questions:
        if q.id not in picks:
            continue
        distribution = _first_token_distribution(q, content, tokens) if tokens else None
        if distribution is None:
            distribution = {o: 1.0 if o == picks[q.id] else 0.0 for o in q.names}
        else:
            used = True
        answers[q.id] = distribution
    return answers, used
