"""When the proxy accounts for the lines it forwarded (parses, logs, remembers the requests).

While an answer is awaited the host's lines wait for it, so that the server computing the
answer gets the CPU; but a request the server never answers is still logged while the session
runs, and still answered with an error if the server dies (proxy.transport.pump).
"""

from __future__ import annotations

import json
from pathlib import Path

from stretto.logs.sessionlog import read_session_log
from stretto.stdio_client import StdioClient
from tests.builders import wait_until
from tests.conftest import PYTHON, SERVERS, proxy

CRASH = [PYTHON, str(SERVERS / "crash_server.py")]


def call(request_id: int, key: str) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "lookup", "arguments": {"key": key}},
    }
    return json.dumps(message).encode() + b"\n"


def wait_for(path_of, text: bytes) -> bytes:
    """The log's bytes once they hold `text` (polled; the proxy writes in batches)."""

    def holding() -> bytes:
        path = path_of()
        data = path.read_bytes() if path is not None else b""
        return data if text in data else b""

    return wait_until(holding, f"{text!r} to reach the log", 30)


def test_a_request_left_unanswered_is_logged_while_the_session_runs(logs: Path) -> None:
    def log_path() -> Path | None:
        found = sorted(logs.glob("*.jsonl"))
        return found[0] if found else None

    with StdioClient(proxy("--record", str(logs), server=CRASH)) as client:
        client.send_line(call(1, "hold"))  # never answered
        data = wait_for(log_path, b'"hold"')
        assert client.proc.poll() is None  # the session still runs
        (entry,) = [json.loads(line) for line in data.splitlines() if b'"hold"' in line]
        assert entry["from"] == "client" and entry["message"]["id"] == 1
        client.send_line(call(2, "crash"))
        answers = [client.read_line(10) for _ in range(2)]
        got = sorted(json.loads(answer)["id"] for answer in answers if answer is not None)
        assert got == [1, 2]  # both still waiting when the server died: both answered
        assert client.proc.wait(10) == 3
    (path,) = logs.glob("*.jsonl")
    log = read_session_log(path)
    assert [line.sender for line in log.lines] == ["client", "client", "proxy", "proxy"]


def test_a_busy_exchange_is_logged_in_the_order_it_passed(logs: Path) -> None:
    """Requests and answers interleaved quickly (the accounting waits for answers, or for
    many lines) end up in the log in the order they were read."""
    lines = [call(n, f"k{n}") for n in range(600)]
    with StdioClient(proxy("--record", str(logs), server=CRASH)) as client:
        for n, line in enumerate(lines):
            client.send_line(line)
            if n % 3 == 2:  # now and then, read what came back
                for _ in range(3):
                    assert client.read_line(10) is not None
        assert client.close() == 0
    (log_path,) = logs.glob("*.jsonl")
    log = read_session_log(log_path)
    ids = [(line.sender, line.message["id"]) for line in log.lines]
    assert sorted(ids, key=lambda entry: entry[1]) == [
        (sender, n) for n in range(600) for sender in ("client", "server")
    ]
    sent = [n for sender, n in ids if sender == "client"]
    echoed = [n for sender, n in ids if sender == "server"]
    assert sent == sorted(sent) and echoed == sorted(echoed)
    for position, (sender, n) in enumerate(ids):  # an answer never comes before its request
        if sender == "server":
            assert ("client", n) in ids[:position]
