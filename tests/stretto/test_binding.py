"""The pick: binding a lookup's arguments from earlier results, and its chance."""

from __future__ import annotations

from stretto.model.binding import (
    NONE,
    OTHER,
    PICKED,
    Rules,
    SessionState,
    chance,
    parse_path,
    pick,
    values_at,
)

BINDINGS = {
    "args": {
        "get_account": {"calls": 4, "passed": {"account": 4}},
        "get_order": {"calls": 8, "passed": {"order": 8, "verbose": 1}},
        "list_all": {"calls": 3, "passed": {}},
        "find": {"calls": 4, "passed": {"email": 4}},
    },
    "sources": [
        {
            "tool": "get_account",
            "arg": "account",
            "values": 4,
            "found": [{"source": "find", "path": "$", "count": 4}],
        },
        {
            "tool": "get_order",
            "arg": "order",
            "values": 8,
            "found": [
                {"source": "get_account", "path": "$.orders[*].id", "count": 8},
                {"source": "noise", "path": "$", "count": 1},
            ],
        },
        {"tool": "find", "arg": "email", "values": 4, "found": []},
    ],
    "agreed": {"get_order": [[6, 8], [3, 3]]},
}


def test_paths() -> None:
    assert parse_path("$") == []
    assert parse_path("$.orders[*].id") == ["orders", None, "id"]
    assert parse_path('$."a b"[*]') == ["a b", None]
    doc = {"orders": [{"id": "X1", "note": "desk"}, {"id": "X2", "note": "lamp"}]}
    assert values_at(doc, ["orders", None, "id"]) == [("X1", ["desk"]), ("X2", ["lamp"])]


def test_picks_values_in_turn_and_says_when_nothing_is_left() -> None:
    rules = Rules.from_flow(BINDINGS)
    assert rules.required["get_order"] == ["order"]  # verbose: 1 of 8 calls, not required
    state = SessionState()
    state.add_user("hi, I'm c1@example.com")
    state.add_result("find", True, "acct_1")
    first = pick(rules, state, "get_account")
    assert (first.arguments, first.mention) == ({"account": "acct_1"}, NONE)
    state.add_call("get_account", {"account": "acct_1"})
    state.add_result(
        "get_account",
        True,
        '{"orders": [{"id": "X1", "note": "desk lamp"}, {"id": "X2", "note": "chair"}]}',
    )
    assert pick(rules, state, "get_order").arguments == {"order": "X1"}
    # a call already sent this turn counts as made
    assert pick(rules, state, "get_order", [("get_order", {"order": "X1"})]).arguments == {
        "order": "X2"
    }
    state.add_call("get_order", {"order": "X1"})
    state.add_call("get_order", {"order": "X2"})
    assert pick(rules, state, "get_order").error == "nothing left to pass as `order`"
    assert pick(rules, state, "find").error == "no source for `email` (the LLM supplies it)"
    assert pick(rules, state, "unknown").error == "never called in training"
    assert pick(rules, state, "list_all").arguments == {}
    state.add_call("list_all", {})
    assert pick(rules, state, "list_all").error == "already looked up"


def test_a_value_the_customer_named_comes_first() -> None:
    rules = Rules.from_flow(BINDINGS)
    state = SessionState()
    state.add_user("It's about the chair, order #X2.")
    state.add_result(
        "get_account",
        True,
        '{"orders": [{"id": "X1", "note": "desk"}, {"id": "X2", "note": "chair"}]}',
    )
    result = pick(rules, state, "get_order")
    assert (result.arguments, result.mention) == ({"order": "X2"}, PICKED)
    assert chance(rules, "get_order", result) == (3 + 1) / (3 + 2)
    state.add_call("get_order", {"order": "X2"})
    other = pick(rules, state, "get_order")
    assert (other.arguments, other.mention) == ({"order": "X1"}, OTHER)
    assert chance(rules, "get_order", other) == (6 + 1) / (8 + 2)  # no named_other: c0
