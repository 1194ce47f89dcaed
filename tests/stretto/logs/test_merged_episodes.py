"""The logs of one host session read as one episode by the offline tools (stretto.logs.merged),
by learning's rule (docs/formats.md §2, "Several servers in one host session")."""

from __future__ import annotations

from pathlib import Path

import pytest

from stretto.logs.episode import Assistant, ToolResult, User
from stretto.logs.merged import HostSessionWarning, read_episodes
from tests.builders import LogBuilder, write_logs


def server_log(session: str, started: int, host: str | None, name: str | None) -> LogBuilder:
    b = LogBuilder()
    extra = {"host_session": host, "server_name": name} if name else {}
    b.lines[0] = {**b.lines[0], "session": session, "started_unix_ms": started, **extra}
    return b


def two_servers() -> list[LogBuilder]:
    github = server_log("g-1", 1000, "host-1", "github")
    github.say(0, "user", "Fix issue 7")
    github.client_call(10, 1, "get_issue", number="7")
    github.client_call(30, 2, "get_labels", number="7")  # the same LLM turn as get_issue
    github.result(40, 1, "the parser crashes").result(41, 2, "bug")
    docs = server_log("d-1", 1005, "host-1", "docs")
    docs.say(0, "user", "Fix issue 7")  # the same --context file: a copy
    docs.client_call(15, 1, "search", query="parser")  # between github's two calls
    docs.result(50, 1, "parser.md")
    return [github, docs]


def test_a_host_sessions_logs_are_one_episode_in_wall_clock_order(tmp_path: Path) -> None:
    (episode,) = read_episodes(write_logs(tmp_path, two_servers()))
    assert episode.id == "g-1+d-1" and episode.started_ms == 1000
    kinds = []
    for event in episode.events:
        if isinstance(event, User):
            kinds.append(("user", event.t_ms))
        elif isinstance(event, Assistant):
            kinds.append(("turn", [(c.name, c.id, c.sent_ms) for c in event.calls]))
        elif isinstance(event, ToolResult):
            kinds.append(("result", event.name, event.call_id, event.t_ms))
    assert kinds == [
        ("user", 0),  # said once: the conversation is the first log's
        # github's turn is split where docs' call came between its two calls
        ("turn", [("github::get_issue", "github::1", 10)]),
        ("turn", [("docs::search", "docs::1", 20)]),
        ("turn", [("github::get_labels", "github::2", 30)]),
        ("result", "github::get_issue", "github::1", 40),
        ("result", "github::get_labels", "github::2", 41),
        ("result", "docs::search", "docs::1", 55),
    ]
    by_key = episode.results_by_key()
    assert [by_key[c.key].content for c in episode.calls()] == [
        "the parser crashes",
        "parser.md",
        "bug",
    ]


def test_other_logs_stay_their_own_and_a_named_log_is_renamed_alone(tmp_path: Path) -> None:
    logs = two_servers()
    later = server_log("g-2", 9000, "host-1", "github")  # after the others ended: its own
    later.client_call(0, 1, "get_issue", number="8").result(1, 1, "ok")
    plain = server_log("p-1", 1000, None, None)
    plain.client_call(0, 1, "get_issue", number="9").result(1, 1, "ok")
    episodes = read_episodes(write_logs(tmp_path, [*logs, later, plain]))
    assert [(e.id, [c.name for c in e.calls()]) for e in episodes] == [
        ("g-1+d-1", ["github::get_issue", "docs::search", "github::get_labels"]),
        ("g-2", ["github::get_issue"]),
        ("p-1", ["get_issue"]),
    ]


def test_the_same_server_twice_in_one_host_session_is_not_merged(tmp_path: Path) -> None:
    first, docs = two_servers()
    twin = server_log("g-3", 1001, "host-1", "github")
    twin.client_call(5, 1, "get_issue", number="7").result(6, 1, "again")
    with pytest.warns(HostSessionWarning, match="github more than once"):
        episodes = read_episodes(write_logs(tmp_path, [first, docs, twin]))
    assert sorted(e.id for e in episodes) == ["d-1", "g-1", "g-3"]
