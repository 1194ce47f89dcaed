"""Turning a log into an episode: LLM turns, results, cancellations, the tool list."""

from __future__ import annotations

from pathlib import Path

from stretto.logs.episode import Assistant, ToolResult, User
from stretto.logs.toollist import contract_of
from tests.builders import LogBuilder


def turns(episode) -> list[list[str]]:
    return [
        [c.name for c in e.calls] for e in episode.events if isinstance(e, Assistant) and e.calls
    ]


def test_parallel_calls_share_a_turn(tmp_path: Path) -> None:
    ep = (
        LogBuilder()
        .client_call(0, 1, "a")
        .client_call(1, 2, "b")
        .result(5, 1, "x1")
        .result(6, 2, "x2")
        .episode(tmp_path)
    )
    assert turns(ep) == [["a", "b"]]
    assert ep.sent_after_results == {"1": 0, "2": 0}


def test_a_quick_call_after_results_joins_unless_it_passes_a_new_value(tmp_path: Path) -> None:
    ep = (
        LogBuilder()
        .say(0, "user", "look up alice")
        .client_call(10, 1, "find", who="alice")
        .result(20, 1, '{"id": "user_9"}')
        .client_call(100, 2, "other", q="alice")  # quick, nothing new: same turn
        .result(110, 2, "done")
        .client_call(200, 3, "get", id="user_9")  # passes user_9, new in this turn
        .result(210, 3, "ok")
        .client_call(900, 4, "late", q="alice")  # more than 500 ms later
        .result(905, 4, "ok")
        .episode(tmp_path)
    )
    assert turns(ep) == [["find", "other"], ["get"], ["late"]]
    assert ep.sent_after_results["2"] == 1


def test_a_value_known_before_the_turn_does_not_split_it(tmp_path: Path) -> None:
    ep = (
        LogBuilder()
        .say(0, "user", "order W7 please")
        .client_call(10, 1, "find")
        .result(20, 1, '{"orders": ["W7", "W8"]}')
        .client_call(30, 2, "get", order="W7")  # W7 was said by the user: no new turn
        .result(40, 2, "fine")
        .client_call(50, 3, "get", order="W8")  # W8 came from this turn's result
        .result(60, 3, "fine")
        .episode(tmp_path)
    )
    assert turns(ep) == [["find", "get"], ["get"]]


def test_something_said_ends_the_turn(tmp_path: Path) -> None:
    ep = (
        LogBuilder()
        .client_call(0, 1, "a")
        .result(5, 1, "r")
        .say(6, "assistant", "Here you go.")
        .client_call(10, 2, "b")
        .result(12, 2, "r")
        .say(13, "user", "thanks")
        .client_call(15, 3, "c")
        .episode(tmp_path)
    )
    kinds = [type(e).__name__ for e in ep.events]
    assert kinds == [
        "Assistant",
        "ToolResult",
        "Assistant",
        "Assistant",
        "ToolResult",
        "User",
        "Assistant",
    ]
    assert turns(ep) == [["a"], ["b"], ["c"]]
    reply = ep.events[2]
    assert isinstance(reply, Assistant) and reply.text == "Here you go." and not reply.calls
    assert isinstance(ep.events[5], User)
    # a call never answered has no result
    assert "3" not in ep.results()


def test_proxy_lookups_join_only_while_a_call_is_open(tmp_path: Path) -> None:
    ep = (
        LogBuilder()
        .client_call(0, 1, "find")
        .result(5, 1, "u1")
        .proxy_call(6, "stretto-1", "get", id="u1")
        .result(8, "stretto-1", "d")
        .proxy_call(9, "stretto-2", "more")
        .client_call(9, 2, "also")
        .result(12, "stretto-2", "m")
        .result(13, 2, "a")
        .result(14, 1, "u1 + lookups", sender="proxy")
        .episode(tmp_path)
    )
    assert turns(ep) == [["find"], ["get"], ["more", "also"]]
    results = ep.results()
    assert results["1"].content == "u1"  # the first answer wins
    assert results["stretto-1"].by_proxy and not results["2"].by_proxy


def test_a_cancelled_call_stops_holding_its_turn(tmp_path: Path) -> None:
    builder = LogBuilder().client_call(0, 1, "slow")
    builder._add(
        5,
        "client",
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
    )
    ep = (
        builder.client_call(2000, 2, "next")
        .result(2010, 2, "ok")
        .result(2020, 1, "late")
        .episode(tmp_path)
    )
    assert turns(ep) == [["slow"], ["next"]]
    assert ep.results()["1"].content == "late"


def test_errors_and_result_content(tmp_path: Path) -> None:
    builder = LogBuilder().client_call(0, 1, "a").client_call(0, 2, "b").client_call(0, "x", "c")
    builder._add(1, "server", {"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "no"}})
    builder._add(
        2,
        "server",
        {
            "jsonrpc": "2.0",
            "id": 2,
            "result": {"content": [{"type": "image", "data": ""}], "structuredContent": {"k": 1}},
        },
    )
    builder._add(
        3,
        "server",
        {
            "jsonrpc": "2.0",
            "id": "x",
            "result": {
                "content": [{"type": "text", "text": "l1"}, {"type": "text", "text": "l2"}],
                "isError": True,
            },
        },
    )
    results = builder.episode(tmp_path).results()
    assert (results["1"].error, results["1"].content) == (True, "no")
    assert (results["2"].error, results["2"].content) == (False, '{"k":1}')
    assert (results["x"].error, results["x"].content) == (True, "l1\nl2")
    assert all(isinstance(r, ToolResult) for r in results.values())


def test_tool_list_and_a_later_listing_wins(tmp_path: Path) -> None:
    builder = LogBuilder()
    for request_id, hint in ((7, True), (8, False)):
        builder._add(0, "client", {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
        builder._add(
            1,
            "server",
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "result": {
                    "tools": [
                        {
                            "name": "t",
                            "description": "  Does\n  things. ",
                            "annotations": {"readOnlyHint": hint},
                            "inputSchema": {
                                "type": "object",
                                "properties": {
                                    "a": {"type": "string", "description": "The a."},
                                    "b": {"type": ["string", "null"]},
                                    "c": {},
                                },
                                "required": ["a"],
                            },
                        },
                        {"name": "g"},
                    ]
                },
            },
        )
    tools = builder.episode(tmp_path).tools
    assert tools["t"].kind == "write" and tools["g"].kind == "generic"
    assert tools["t"].summary == "Does things." and tools["t"].args == {"a": "The a."}
    assert tools["t"].contract == "a:string!, b:string|null, c:any"
    assert tools["g"].contract is None


def test_contract_strings_sort_by_the_whole_string() -> None:
    schema = {
        "properties": {"reason": {"type": "string"}, "order_id": {"type": "string"}},
        "required": ["order_id"],
    }
    assert contract_of(schema) == "order_id:string!, reason:string"
