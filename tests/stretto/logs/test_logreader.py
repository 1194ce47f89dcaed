"""The one log reader: its three policies for a line it cannot use, the torn last line, the
flow log; and the one pairing of tool calls with their answers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from stretto.logs.episode import ToolResult, episode_from_log
from stretto.logs.logreader import (
    NAMED,
    LineReader,
    LogError,
    flow_log_of,
    read_flow_log,
    session_log_of,
)
from stretto.logs.pairing import Pairing
from stretto.logs.sessionlog import parse_session_log

GOOD = b'{"a": 1}\n'
NOT_JSON = b"{not json\n"


def read_all(data: bytes, policy) -> tuple[LineReader, list[tuple[int, object]]]:
    reader = LineReader(io.BytesIO(data), "x.jsonl", policy)
    return reader, list(reader.values())


def test_strict_raises_naming_the_file_and_the_line() -> None:
    with pytest.raises(LogError, match=r"^x\.jsonl:2: not JSON \(Expecting property name"):
        read_all(GOOD + NOT_JSON + GOOD, "strict")


def test_skip_drops_the_line_counts_it_and_names_the_first_few() -> None:
    reader, values = read_all(GOOD + NOT_JSON * (NAMED + 5) + GOOD, "skip")
    assert [number for number, _ in values] == [1, NAMED + 7]
    assert reader.skipped == NAMED + 5 and len(reader.bad) == NAMED
    assert reader.bad[0].problem.startswith("x.jsonl:2: not JSON (")
    assert reader.bad[0].text == b""  # skipped, not kept


def test_quarantine_keeps_every_bad_line_with_its_bytes() -> None:
    reader, values = read_all(GOOD + NOT_JSON * (NAMED + 5) + GOOD, "quarantine")
    assert len(values) == 2 and len(reader.bad) == reader.skipped == NAMED + 5
    assert all(bad.text == NOT_JSON for bad in reader.bad)
    assert [bad.number for bad in reader.bad] == list(range(2, NAMED + 7))


@pytest.mark.parametrize("policy", ["strict", "skip", "quarantine"])
def test_a_torn_last_line_is_dropped_and_kept_under_every_policy(policy) -> None:
    reader, values = read_all(GOOD + b'{"a": ', policy)
    assert values == [(1, {"a": 1})]
    assert reader.torn is not None and reader.torn.number == 2 and reader.torn.text == b'{"a": '
    assert reader.torn_notice() == (
        "x.jsonl:2: the last line is cut off (a crash mid-write?); dropped it"
    )
    assert reader.skipped == 0


def test_an_unterminated_last_line_that_is_json_is_read() -> None:
    reader, values = read_all(GOOD + b'{"b": 2}', "strict")
    assert values == [(1, {"a": 1}), (2, {"b": 2})] and reader.torn is None


def test_the_header_is_read_strictly_whatever_the_policy() -> None:
    reader = LineReader(io.BytesIO(b"\n" + NOT_JSON + GOOD), "x.jsonl", "skip")
    with pytest.raises(LogError, match=r"x\.jsonl:2: not JSON"):
        reader.header()


def test_offsets_count_every_line_blank_ones_too() -> None:
    data = GOOD + b"\n" + b'{"b": "\\r\xe2\x80\xa8"}\n' + GOOD
    reader, values = read_all(data, "strict")
    assert [n for n, _ in values] == [1, 3, 4]
    assert [data[o:].split(b"\n", 1)[0] for o in reader.offsets] == data.split(b"\n")[:-1]


def test_a_caller_rejects_a_line_by_the_same_policy() -> None:
    reader = LineReader(io.BytesIO(GOOD + b"[1]\n"), "x.jsonl", "quarantine")
    kept = []
    for number, value in reader.values():
        if isinstance(value, dict):
            kept.append(number)
        else:
            reader.reject(LogError("x.jsonl", number, "expected an object", "line"))
    assert kept == [1]
    assert reader.bad[0].problem == "x.jsonl:2: field `line`: expected an object"
    assert reader.bad[0].text == b"[1]\n"


def write_flow_log(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(lines))
    return path


def test_a_flow_log_line_must_be_an_object_with_the_required_fields(tmp_path: Path) -> None:
    path = write_flow_log(
        tmp_path / "s.flow.jsonl",
        [b'{"after": 1, "address": "a"}\n', b"[2]\n", b'{"address": "b"}\n', b'{"after": 3'],
    )
    flow = read_flow_log(path, "skip", required=("after",))
    assert flow.entries == [(1, {"after": 1, "address": "a"})]
    assert [bad.problem for bad in flow.reader.bad] == [
        f"{path}:2: a flow log line must be a JSON object",
        f"{path}:3: field `after`: missing",
    ]
    assert flow.reader.torn is not None and flow.reader.torn.number == 4
    with pytest.raises(LogError, match=r"s\.flow\.jsonl:2: a flow log line must be"):
        read_flow_log(path, "strict")


# --- pairing -----------------------------------------------------------------------------------


def test_a_flow_log_is_named_beside_its_session_log_and_back(tmp_path: Path) -> None:
    """The proxy writes `<session>.flow.jsonl` beside `<session>.jsonl`; evaluate finds the
    session log from the flow log, so each name must lead back to the other."""
    session = tmp_path / "20260101T000000-ab12.jsonl"
    assert flow_log_of(session) == tmp_path / "20260101T000000-ab12.flow.jsonl"
    assert session_log_of(flow_log_of(session)) == session


def test_the_first_answer_wins_and_a_reused_id_pairs_with_its_latest_call() -> None:
    pairing: Pairing[str] = Pairing()
    pairing.sent("1", "first")
    pairing.sent("1", "second")
    assert pairing.waiting("1") == "second"
    assert pairing.answered("1") == "second"
    assert pairing.answered("1") is None  # a later copy answers nothing


def test_each_result_keeps_its_answers_line_and_whether_it_was_an_error() -> None:
    header = {"stretto_mcp_log": 2, "session": "s", "started_unix_ms": 0, "server_command": []}
    call = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "get", "arguments": {}}}
    lines = [
        header,
        {"t_ms": 1, "from": "client", "message": call | {"id": 1}},
        {"t_ms": 2, "from": "client", "message": call | {"id": 2}},
        {"t_ms": 3, "from": "server", "message": {"jsonrpc": "2.0", "id": 2, "error": {}}},
        {"t_ms": 4, "from": "server", "message": {"jsonrpc": "2.0", "id": 1, "result": {}}},
        {"t_ms": 5, "from": "proxy", "message": {"jsonrpc": "2.0", "id": 1, "result": {}}},
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    episode = episode_from_log(parse_session_log(data, "s.jsonl"))
    results = [e for e in episode.events if isinstance(e, ToolResult)]
    assert [(r.call_key, r.answer_line, r.refused) for r in results] == [
        ((3, 0), 4, True),
        ((2, 0), 5, False),  # the server's answer; the proxy's copy pairs with nothing
    ]
