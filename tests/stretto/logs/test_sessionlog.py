"""Reading session logs: the reference's, ours, and broken ones."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from stretto.logs.episode import read_episode
from stretto.logs.merged import read_episodes
from stretto.logs.sessionlog import LogError, TornLineWarning, list_session_logs, read_session_log
from tests.conftest import REFERENCE_HOME

HEADER = {
    "stretto_mcp_log": 2,
    "session": "20270101T090000.000Z-1",
    "started_unix_ms": 0,
    "server_command": ["srv"],
    "domain": "shop",
    "agent_model": None,
}


def write_log(path: Path, lines: list[object], *, tail: bytes = b"") -> Path:
    text = "".join(
        json.dumps(line) + "\n" if not isinstance(line, str) else line + "\n" for line in lines
    )
    path.write_bytes(text.encode() + tail)
    return path


def test_reads_every_reference_log() -> None:
    for folder in ("logs/shop", "logs/retail", "served/shop", "shadow/shop"):
        paths = list_session_logs(REFERENCE_HOME / folder)
        assert paths and not any(p.name.endswith((".flow.jsonl", ".confirm.jsonl")) for p in paths)
        for path in paths:
            log = read_session_log(path)
            assert log.header.version == 2
            assert log.header.session == path.stem


def test_reference_shop_episodes() -> None:
    episodes = read_episodes(REFERENCE_HOME / "logs/shop")
    assert len(episodes) == 6
    first = episodes[0]
    assert first.id == "20260928T020400.548Z-14457"
    assert first.domain == "shop" and first.agent_model == "quickstart"  # from clientInfo
    assert {n: t.kind for n, t in first.tools.items()} == {
        "find_user_id_by_email": "read",
        "get_user_details": "read",
        "get_order_details": "read",
        "cancel_pending_order": "write",
    }
    assert first.tools["cancel_pending_order"].contract == "order_id:string!, reason:string!"
    assert (
        first.tools["get_user_details"].summary == "Get a user's details, including their orders."
    )
    names = [c.name for c in first.calls()]
    assert names == [
        "find_user_id_by_email",
        "get_user_details",
        "get_order_details",
        "get_order_details",
        "cancel_pending_order",
    ]


def test_served_logs_tell_lookups_apart_and_the_first_answer_wins() -> None:
    (episode, _) = read_episodes(REFERENCE_HOME / "served/shop")
    calls = episode.calls()
    assert [(c.name, c.by_proxy) for c in calls][:4] == [
        ("find_user_id_by_email", False),
        ("get_user_details", True),
        ("get_order_details", True),
        ("get_order_details", True),
    ]
    results = episode.results()
    # The agent's result is the server's, not the proxy's later copy with lookups appended.
    assert results[calls[0].id].content == "user_41"
    assert results[calls[1].id].by_proxy


def test_a_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = write_log(
        tmp_path / "a.jsonl", [HEADER, "{not json", {"t_ms": 1, "from": "client", "message": {}}]
    )
    with pytest.raises(LogError, match=r"a\.jsonl:2: not JSON"):
        read_session_log(path)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ({"t_ms": -1, "from": "client", "message": {}}, "t_ms"),
        ({"t_ms": 1, "from": "someone", "message": {}}, "from"),
        ({"t_ms": 1, "from": "client"}, "message"),
        ({"t_ms": 1, "from": "client", "message": {}, "raw": "x"}, "message"),
        ({"t_ms": 1, "from": "client", "raw": 5}, "raw"),
    ],
)
def test_a_bad_field_is_named(tmp_path: Path, line: dict, field: str) -> None:
    path = write_log(tmp_path / "b.jsonl", [HEADER, line])
    with pytest.raises(LogError) as caught:
        read_session_log(path)
    assert caught.value.line == 2 and caught.value.field == field
    assert f"b.jsonl:2: field `{field}`" in str(caught.value)


def test_a_message_nested_deeper_than_pythons_recursion_limit_is_read(tmp_path: Path) -> None:
    """The proxy logs valid JSON as a message at any depth; the reader reads it back."""
    deep = "[" * 5_000 + "]" * 5_000
    path = write_log(
        tmp_path / "deep.jsonl",
        [
            HEADER,
            '{"t_ms":1,"from":"server","message":{"jsonrpc":"2.0","id":1,"result":' + deep + "}}",
        ],
    )
    (line,) = read_session_log(path).lines
    assert line.is_json and line.message["id"] == 1
    value, depth = line.message["result"], 0
    while isinstance(value, list):
        value, depth = value[0] if value else None, depth + 1
    assert depth == 5_000


def test_a_torn_last_line_is_dropped_with_a_warning(tmp_path: Path) -> None:
    path = write_log(
        tmp_path / "c.jsonl",
        [HEADER, {"t_ms": 1, "from": "client", "raw": "x"}],
        tail=b'{"t_ms":2,"from":"ser',
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = read_session_log(path)
    assert log.torn_last_line and len(log.lines) == 1
    assert any(
        issubclass(w.category, TornLineWarning) and "c.jsonl:3" in str(w.message) for w in caught
    )


def test_a_torn_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = write_log(
        tmp_path / "d.jsonl",
        [HEADER, '{"t_ms":2,"from":"ser', {"t_ms": 1, "from": "client", "raw": "x"}],
    )
    with pytest.raises(LogError, match="d.jsonl:2"):
        read_session_log(path)


def test_an_unknown_version_is_refused_with_its_number(tmp_path: Path) -> None:
    path = write_log(tmp_path / "e.jsonl", [{**HEADER, "stretto_mcp_log": 7}])
    with pytest.raises(LogError, match="unknown session-log version 7"):
        read_session_log(path)


def test_version_one_is_read(tmp_path: Path) -> None:
    path = write_log(
        tmp_path / "f.jsonl",
        [{**HEADER, "stretto_mcp_log": 1}, {"t_ms": 0, "from": "client", "raw": "x"}],
    )
    assert read_session_log(path).header.version == 1


def test_not_a_log_at_all(tmp_path: Path) -> None:
    path = write_log(tmp_path / "g.jsonl", [{"hello": 1}])
    with pytest.raises(LogError, match="field `stretto_mcp_log`: missing"):
        read_session_log(path)
    empty = tmp_path / "h.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(LogError, match="empty"):
        read_session_log(empty)


def test_a_line_with_carriage_returns_inside_json_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "i.jsonl"
    path.write_bytes(
        json.dumps(HEADER).encode()
        + b"\n"
        + b'{"t_ms":0,"from":"client","message":{"a":\r1,"s":"x\xe2\x80\xa8y"}}\n'
    )
    (line,) = read_session_log(path).lines
    assert line.message == {"a": 1, "s": "x\u2028y"}
    assert read_episode(path).events == []
