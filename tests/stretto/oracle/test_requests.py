"""The question set at a decision, its state slice, its cache key, and runner URIs."""

from __future__ import annotations

import hashlib
import json

import pytest

from stretto.logs.episode import Assistant, ToolCall, ToolResult, User
from stretto.oracle.errors import UnknownRunner
from stretto.oracle.questions import (
    PredicateError,
    dataflow_hints,
    load_predicates,
    site_questions,
)
from stretto.oracle.request import Question, Request, cache_key, canonical
from stretto.oracle.runners import open_runner, parse_uri
from stretto.oracle.state import Conversation
from tests.stretto.oracle.conftest import DOCS, PENDING


def test_questions_v2_at_a_site_with_two_lookups(request_at_site) -> None:
    questions = {q.id: q for q in request_at_site.questions}
    assert list(questions) == ["next", "go_on", "tool", "pred_list_pending"]
    assert questions["next"].names == ["get_order_details", "get_user_details", "respond"]
    assert questions["next"].description("get_order_details") == (
        "Get the status and details of an order."
    )
    assert questions["go_on"].yes_no and questions["go_on"].names == ["no", "yes"]
    assert questions["tool"].names == ["get_order_details", "get_user_details"]
    assert questions["pred_list_pending"].description("yes") == "More remain."


def test_one_lookup_asks_no_tool_question() -> None:
    ids = [q.id for q in site_questions(["get_order_details"], DOCS)]
    assert ids == ["next", "go_on"]


def test_criteria_are_clipped_and_carry_dataflow_hints() -> None:
    docs = {"lookup": {"summary": "x" * 300}}
    [nxt, *_] = site_questions(["lookup"], docs)
    assert len(nxt.description("lookup")) == 250 and nxt.description("lookup").endswith("…")
    bindings = {
        "sources": [
            {
                "tool": "get_order_details",
                "arg": "order_id",
                "values": 3,
                "found": [{"source": "get_user_details", "path": "$.orders[*]", "count": 3}],
            },
        ]
    }
    hints = dataflow_hints(bindings)
    assert hints == {"get_user_details": "Its results supply `order_id` of get_order_details."}
    [nxt, *_] = site_questions(["get_user_details"], DOCS, hints=hints)
    assert nxt.description("get_user_details").endswith(
        "orders. Its results supply `order_id` of get_order_details."
    )


def test_the_state_slice_is_clipped() -> None:
    events = [User("a" * 1200)]
    for i in range(25):
        events += [
            Assistant(None, [ToolCall(str(i), "get", {"id": str(i), "pad": "p" * 200}, 0)]),
            ToolResult(str(i), "get", i == 24, "r" * 2000),
        ]
    for i in range(6):
        events.append(User(f"later {i} " + "b" * 700))
    events.append(Assistant("Let me check. " + "c" * 700, []))
    events.append(Assistant(None, [ToolCall("pending", "get", {"id": "z"}, 0)]))  # no answer yet
    state = Conversation.from_events(events).slice()
    assert len(state["customer_request"]) == 1000 and state["customer_request"].endswith("…")
    assert [m[:7] for m in state["later_customer_messages"]] == [
        "later 2",
        "later 3",
        "later 4",
        "later 5",
    ]
    assert all(len(m) == 600 for m in state["later_customer_messages"])
    assert len(state["agent_last_message"]) == 600
    assert len(state["earlier_lookups"]) == 16
    first = state["earlier_lookups"][0]
    assert first.startswith('get({"id":"5","pad":"ppp') and first.endswith("…) → ok")
    assert len(first) == len("get()") + 160 + len(" → ok")
    assert [r["arguments"]["id"] for r in state["latest_results"]] == ["21", "22", "23", "24"]
    assert all(len(r["result"]) == 1500 for r in state["latest_results"])
    assert "error" not in state["latest_results"][0] and state["latest_results"][3]["error"]


def test_the_cache_key_is_the_sha256_of_the_serialized_request(request_at_site) -> None:
    wire = request_at_site.wire("jev://jev-latest")
    assert wire["questions"]["go_on"] == {
        "type": "noul",
        "instructions": request_at_site.question("go_on").text,
        "criteria": {
            "true": "It calls one more read-only tool right away.",
            "false": "It replies, asks the customer, or makes a change first.",
        },
    }
    text = canonical(wire)
    assert text == json.dumps(wire, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert cache_key(wire) == hashlib.sha256(text.encode()).hexdigest()
    assert cache_key(request_at_site.wire("ollama://other")) != cache_key(wire)
    assert cache_key(request_at_site.wire("simulate://habit", "f/s/1")) != cache_key(
        request_at_site.wire("simulate://habit", "f/s/2")
    )


def test_the_key_does_not_depend_on_insertion_order() -> None:
    a = Request({"b": 1, "a": 2}, (Question.choice("next", "?", {"y": "", "x": ""}),))
    b = Request({"a": 2, "b": 1}, (Question.choice("next", "?", {"x": "", "y": ""}),))
    assert cache_key(a.wire("m")) == cache_key(b.wire("m"))


def test_runner_uris() -> None:
    assert parse_uri("ollama://qwen3:8b") == ("ollama", "qwen3:8b")
    assert parse_uri("replay") == ("replay", "")
    with pytest.raises(UnknownRunner, match=r"no runner for `gemini://` \(known: claude://MODEL"):
        parse_uri("gemini://pro")
    with pytest.raises(UnknownRunner, match="name a model after `jev://`"):
        parse_uri("jev://")
    with pytest.raises(UnknownRunner, match="expected scheme://MODEL or replay"):
        parse_uri("ollama")
    with pytest.raises(UnknownRunner, match="simulate://random or simulate://habit"):
        open_runner("simulate://coin")
    with pytest.raises(UnknownRunner, match="no model to replay"):
        open_runner("replay")
    replay = open_runner("replay", replayed="simulate://habit")
    assert replay.uri == "simulate://habit" and replay.draws


def test_a_bad_predicates_file_is_named_with_its_field(tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            {
                "predicates": [
                    PENDING.to_json(),
                    {"id": "x", "question": "?", "yes": "y", "no": "n", "favors": "sometimes"},
                ]
            }
        )
    )
    with pytest.raises(PredicateError, match=r"p\.json: field `predicates\[1\]\.favors`"):
        load_predicates(path)
    path.write_text(json.dumps({"predicates": [{**PENDING.to_json(), "favors": {"lookup": "t"}}]}))
    [loaded] = load_predicates(path)
    assert loaded.lookup and loaded.favors_option("t", "other")
    path.write_text("[")
    with pytest.raises(PredicateError, match=r"p\.json: not JSON"):
        load_predicates(path)
