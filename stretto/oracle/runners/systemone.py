"""The System-One wire format (`POST /v1/systemone`), spoken by TypeSafe's service (jev://)
and by Ollama's decision models: `{model, state, questions}` in, `{model, answers, usage}` out,
a choice answered `{type: choice, choice, confidence, probabilities}`, a yes/no (`noul`)
answered `{type: noul, noul: P(yes)}`."""

from __future__ import annotations

from typing import Any

from stretto.oracle.errors import Malformed
from stretto.oracle.request import NO, YES, Answers, Question, Request, choice_probabilities
from stretto.oracle.request import probability as read_probability
from stretto.oracle.request import yes_no as yes_no_answer
from stretto.oracle.runners.base import count, member, text


def question_body(question: Question, all_choice: bool) -> dict:
    """A question as sent. `all_choice` asks yes/no questions as choices over yes and no
    (Ollama's decision models: one choice question per question)."""
    if question.yes_no and all_choice:
        return {
            "type": "choice",
            "instructions": question.text,
            "criteria": {YES: question.description(YES), NO: question.description(NO)},
        }
    return question.wire()


def request_body(request: Request, model: str, all_choice: bool = False) -> dict:
    return {
        "model": model,
        "state": request.state,
        "questions": {q.id: question_body(q, all_choice) for q in request.questions},
    }


def read_answers(request: Request, body: Any, label: str) -> tuple[Answers, str | None, dict]:
    """(answers, the model that answered, usage) from a System-One response. An answer of the
    wrong type, a probability out of range or an option not offered is refused; a question
    left unanswered is left out (the answer is then incomplete)."""
    if not isinstance(body, dict) or not isinstance(body.get("answers"), dict):
        raise Malformed(f"{label}: the answer has no `answers` object")
    answers: Answers = {}
    for question in request.questions:
        answer = body["answers"].get(question.id)
        if answer is None:
            continue
        where = f"{label}: answers.{question.id}"
        if not isinstance(answer, dict):
            raise Malformed(f"{where}: expected an object")
        kind = answer.get("type")
        if kind == "noul" and question.yes_no:
            answers[question.id] = yes_no_answer(read_probability(answer.get("noul"), where))
        elif kind == "choice":
            if "probabilities" not in answer:
                raise Malformed(f"{where}: a choice answer without `probabilities`")
            answers[question.id] = choice_probabilities(
                question, answer["probabilities"], f"{where}.probabilities"
            )
        else:
            expected = "noul or choice" if question.yes_no else "choice"
            raise Malformed(f"{where}: expected a {expected} answer, got type {kind!r}")
    usage = member(body, "usage")
    counted = {"input": count(usage, "input_tokens"), "output": count(usage, "output_tokens")}
    return answers, text(body, "model"), counted
