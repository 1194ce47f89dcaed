"""The questions asked at a decision (v2, ../shared/spec/algorithms.md §13.1) and the yes/no
predicates a flow may add (`--predicates FILE`).

At a site whose lookups are L (sorted): `next`, a choice over `respond` and L; `go_on`, yes or
no: does the agent make another lookup now; `tool`, a choice over L when there are two or
more; and `pred_<id>` for each predicate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stretto.oracle.errors import OracleError
from stretto.oracle.request import Question, Request
from stretto.oracle.state import clip
from stretto.vocabulary import RESPOND

NEXT, GO_ON, TOOL = "next", "go_on", "tool"
PREDICATE_PREFIX = "pred_"
CRITERION_CHARS = 250
QUESTIONS_VERSION = "v2"

NEXT_TEXT = (
    "The agent has just received the result of its latest tool call (see latest_results). "
    "What does it do next?"
)
RESPOND_TEXT = (
    "Hand back: the agent replies to the customer, asks them something, or calls a tool that "
    "changes something, instead of looking something up now."
)
GO_ON_TEXT = "Does the agent make another lookup now, before it replies to the customer?"
GO_ON_YES = "It calls one more read-only tool right away."
GO_ON_NO = "It replies, asks the customer, or makes a change first."
TOOL_TEXT = "If the agent makes another lookup now, which one?"
FAVORS = ("same_lookup", "any_lookup", "hand_back")
_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")


class PredicateError(OracleError):
    """A predicates file that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class Predicate:
    """A yes/no question whose answer the arbiter may weigh for the options it favours."""

    id: str
    favors: str  # same_lookup | any_lookup | hand_back | a tool's name (favours that lookup)
    question: str
    yes: str
    no: str
    lookup: bool = False  # `favors` names a tool: {"lookup": TOOL} in the file

    def favors_option(self, option: str, prev: str) -> bool:
        """Whether a yes speaks for `option` at a site after the call `prev`."""
        if self.lookup:
            return option == self.favors
        if self.favors == "same_lookup":
            return option == prev
        if self.favors == "any_lookup":
            return option != RESPOND
        return option == RESPOND  # hand_back

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "favors": {"lookup": self.favors} if self.lookup else self.favors,
            "question": self.question,
            "yes": self.yes,
            "no": self.no,
        }


def parse_predicates(value: Any, source: str) -> list[Predicate]:
    """Predicates from `[{id, favors, question, yes, no}, ...]`; PredicateError names the
    field of the first bad one."""
    if not isinstance(value, list):
        raise PredicateError(f"{source}: field `predicates`: expected a list")
    out: list[Predicate] = []
    for i, item in enumerate(value):
        where = f"{source}: field `predicates[{i}]"
        if not isinstance(item, dict):
            raise PredicateError(f"{where}`: expected an object")
        for name in ("id", "question", "yes", "no"):
            if not isinstance(item.get(name), str) or not item[name].strip():
                raise PredicateError(f"{where}.{name}`: expected a non-empty string")
        if not _ID.match(item["id"]):
            raise PredicateError(f"{where}.id`: letters, digits and _ only (at most 64)")
        if any(p.id == item["id"] for p in out):
            raise PredicateError(f"{where}.id`: `{item['id']}` is used twice")
        favors = item.get("favors")
        if (
            isinstance(favors, dict)
            and set(favors) == {"lookup"}
            and isinstance(favors["lookup"], str)
        ):
            predicate = Predicate(
                item["id"], favors["lookup"], item["question"], item["yes"], item["no"], True
            )
        elif favors in FAVORS:
            predicate = Predicate(item["id"], favors, item["question"], item["yes"], item["no"])
        else:
            raise PredicateError(
                f'{where}.favors`: expected same_lookup, any_lookup, hand_back or {{"lookup": '
                "TOOL}"
            )
        out.append(predicate)
    return out


def load_predicates(path: str | Path) -> list[Predicate]:
    """A predicates file: `{"predicates": [...]}`."""
    path = Path(path)
    try:
        value = json.loads(path.read_text())
    except OSError as exc:
        raise PredicateError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise PredicateError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(value, dict) or "predicates" not in value:
        raise PredicateError(f'{path}: expected {{"predicates": [...]}}')
    return parse_predicates(value["predicates"], str(path))


def dataflow_hints(bindings: Mapping[str, Any]) -> dict[str, str]:
    """tool -> `Its results supply `arg` of T, ...`: which lookups' arguments the flow binds
    from that tool's results (`--dataflow-hints`)."""
    supplies: dict[str, set[str]] = {}
    for entry in [*bindings.get("sources", []), *bindings.get("lists", [])]:
        for found in entry.get("found", []):
            supplies.setdefault(found["source"], set()).add(f"`{entry['arg']}` of {entry['tool']}")
    return {
        tool: "Its results supply " + ", ".join(sorted(targets)) + "."
        for tool, targets in sorted(supplies.items())
    }


def criterion(tool: str, docs: Mapping[str, Any], hints: Mapping[str, str] | None) -> str:
    summary = ""
    doc = docs.get(tool)
    if isinstance(doc, dict) and isinstance(doc.get("summary"), str):
        summary = doc["summary"].strip()
    text = summary or f"Call {tool}."
    if hints and tool in hints:
        text = f"{text} {hints[tool]}"
    return clip(text, CRITERION_CHARS)


def site_questions(
    lookups: Iterable[str],
    docs: Mapping[str, Any],
    predicates: Iterable[Predicate] = (),
    hints: Mapping[str, str] | None = None,
) -> tuple[Question, ...]:
    """The v2 questions at a site offering `lookups`."""
    names = sorted(set(lookups))
    criteria = {tool: criterion(tool, docs, hints) for tool in names}
    questions = [
        Question.choice(NEXT, NEXT_TEXT, {RESPOND: RESPOND_TEXT, **criteria}),
        Question.yes_or_no(GO_ON, GO_ON_TEXT, GO_ON_YES, GO_ON_NO),
    ]
    if len(names) >= 2:
        questions.append(Question.choice(TOOL, TOOL_TEXT, criteria))
    for predicate in predicates:
        questions.append(
            Question.yes_or_no(
                PREDICATE_PREFIX + predicate.id, predicate.question, predicate.yes, predicate.no
            )
        )
    return tuple(questions)


def site_request(
    state: Mapping[str, Any],
    lookups: Iterable[str],
    docs: Mapping[str, Any],
    predicates: Iterable[Predicate] = (),
    hints: Mapping[str, str] | None = None,
) -> Request:
    return Request(state, site_questions(lookups, docs, predicates, hints))


def probe_request() -> Request:
    """One small question set (`doctor --network` asks it to see that a runner answers)."""
    state = {
        "customer_request": "Where is my order #W123?",
        "later_customer_messages": [],
        "agent_last_message": "",
        "earlier_lookups": [],
        "latest_results": [
            {"tool": "find_order", "arguments": {"order_id": "#W123"}, "result": '{"id": "#W123"}'}
        ],
    }
    docs = {"get_order_status": {"summary": "Get the shipping status of an order."}}
    return site_request(state, ["get_order_status"], docs)
