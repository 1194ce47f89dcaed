"""stretto.offline.walk: the episode walked as the proxy saw it, and the one agent_made rule."""

from __future__ import annotations

import json
from pathlib import Path

from stretto.logs.episode import ToolCall
from stretto.logs.steps import episode_steps
from stretto.offline.walk import BOUND, EXACT, Point, Turn, agent_made, walk
from tests.builders import LogBuilder


def points(w) -> list[tuple[str, list[str], set[str]]]:
    """(the answer's tool, the history, the tools called so far) at each decision point."""
    return [
        (e.result.name, list(e.view.history), set(e.view.state.called))
        for e in w
        if isinstance(e, Point)
    ]


def test_a_reply_nobody_answered_stays_respond_end(tmp_path: Path) -> None:
    b = LogBuilder()
    b.say(1, "user", "I'm c9@example.com")
    b.client_call(10, 1, "find_account", email="c9@example.com").result(11, 1, "acct_9")
    b.say(2000, "assistant", "Found you; reading your account.")  # no one answers it
    b.client_call(3000, 2, "get_account", account="acct_9").result(3001, 2, "{}")
    b.say(4000, "assistant", "Here it is.").say(5000, "user", "Thanks.")
    b.say(6000, "assistant", "Bye.")
    episode = b.episode(tmp_path)
    w = walk(episode)
    assert [p[:2] for p in points(w)] == [
        ("find_account", ["find_account"]),
        ("get_account", ["find_account", "respond (end)", "get_account"]),
    ]
    assert w.view.history == [
        "find_account",
        "respond (end)",
        "get_account",
        "respond",  # the user answered it
        "respond (end)",  # the session ended on it
    ]
    # the steps name them the same way
    assert [s.name() for s in episode_steps(episode)] == w.view.history


def test_calls_go_out_as_the_host_sent_them(tmp_path: Path) -> None:
    b = LogBuilder()
    # one LLM turn: get_order A, and once A's answer is back (within 500 ms) get_order B
    b.client_call(10, 1, "get_order", order="A").result(11, 1, "{}")
    b.client_call(20, 2, "get_order", order="B").result(21, 2, "{}")
    episode = b.episode(tmp_path)
    assert episode.sent_after_results == {"1": 0, "2": 1}
    turns = [e for e in walk(episode) if isinstance(e, Turn)]
    assert len(turns) == 1 and [c.id for c in turns[0].calls] == ["1", "2"]
    w = walk(episode)
    seen: list[tuple] = []
    for event in w:
        if isinstance(event, Point):
            seen.append((event.result.call_id, set(event.view.state.used["get_order"])))
            # the agent's own turn's later call is after it, but not in a later turn
            after, later = event.calls_after(), event.later_turns()
            seen.append(([c.id for c in after], [c.id for c in later]))
    assert seen == [
        ("1", {("order", "A")}),  # B was not sent yet when A's answer came back
        (["2"], []),
        ("2", {("order", "A"), ("order", "B")}),
        ([], []),
    ]


def test_the_recorded_lookups_are_fed_or_left_out(tmp_path: Path) -> None:
    b = LogBuilder()
    b.client_call(10, 1, "find_account", email="c9@example.com").result(11, 1, "acct_9")
    b.proxy_call(12, "stretto-1", "get_account", account="acct_9").result(13, "stretto-1", "{}")
    b.client_call(2000, 2, "get_order", order="X9").result(2001, 2, "{}")
    episode = b.episode(tmp_path)
    served = walk(episode)
    assert [(p[0], p[1]) for p in points(served)][-1] == (
        "get_order",
        ["find_account", "get_account", "get_order"],
    )
    assert "get_account" in served.view.state.called
    own = walk(episode, lookups=False)
    events = list(own)
    assert [type(e).__name__ for e in events] == ["Turn", "Point", "Turn", "Point"]
    assert own.view.history == ["find_account", "get_order"]
    assert "get_account" not in own.view.state.called


def test_a_consumer_skips_the_calls_it_answered(tmp_path: Path) -> None:
    b = LogBuilder()
    b.client_call(10, 1, "find_account", email="c9@example.com").result(11, 1, "acct_9")
    b.client_call(2000, 2, "get_account", account="acct_9").result(2001, 2, "{}")
    b.say(3000, "assistant", "Done.")
    w = walk(b.episode(tmp_path))
    kinds = []
    for event in w:
        kinds.append(type(event).__name__)
        if isinstance(event, Turn) and event.calls[0].name == "get_account":
            event.skipped = {event.calls[0].key}
    assert kinds == ["Turn", "Point", "Turn", "Reply"]  # no answer for the skipped call
    assert w.view.history == ["find_account", "respond (end)"]
    assert "get_account" not in w.view.state.called


def call(name: str, **arguments) -> ToolCall:
    return ToolCall("x", name, arguments, 0)


def test_agent_made_exact_or_bound_until_the_next_write() -> None:
    later = [
        call("get_order", order="X9", expand=True),
        call("close_order", order="X9"),
        call("get_order", order="Y9"),
    ]
    writes = {"close_order"}
    # bound: every argument given equal by value text; the agent may pass more
    assert agent_made("get_order", {"order": "X9"}, later, match=BOUND, writes=writes) == 0
    assert agent_made("get_order", {"order": "X9"}, later, match=EXACT, writes=writes) is None
    assert (
        agent_made("get_order", {"order": "X9", "expand": True}, later, match=EXACT, writes=writes)
        == 0
    )
    # value text: 7 and "7" are the same bound value, not the same JSON
    numbers = [call("get_order", order="7")]
    assert agent_made("get_order", {"order": 7}, numbers, match=BOUND, writes=None) == 0
    assert agent_made("get_order", {"order": 7}, numbers, match=EXACT, writes=None) is None
    # the next write ends the search, unless there is no cut
    assert agent_made("get_order", {"order": "Y9"}, later, match=BOUND, writes=writes) is None
    assert agent_made("get_order", {"order": "Y9"}, later, match=BOUND, writes=None) == 2
    # a call made already does not count
    made = [("get_order", {"order": "X9"})]
    assert (
        agent_made("get_order", {"order": "X9"}, later, match=BOUND, writes=None, made=made) is None
    )
    assert agent_made("get_order", {"order": "Y9"}, later, match=BOUND, writes=None, made=made) == 2


def test_steps_name_a_failed_call_and_an_answered_reply(tmp_path: Path) -> None:
    b = LogBuilder()
    b.say(1, "user", "hi")
    b.client_call(10, 1, "find_account", email="x").result(11, 1, "no such", error=True)
    b.say(2000, "assistant", "Which email?").say(3000, "user", json.dumps("c9@example.com"))
    steps = episode_steps(b.episode(tmp_path))
    assert [s.name() for s in steps] == ["find_account (error)", "respond"]
