"""`--upstream URL`: a real Streamable HTTP server (the mcp SDK's) on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.transport.upstream_http import BUSY_CONNECTIONS, STREAM_BYTES, one_line
from stretto.logs.episode import read_episode
from stretto.logs.sessionlog import read_session_log
from stretto.stdio_client import StdioClient, result_text
from tests.builders import wait_until
from tests.conftest import PROXY, demo_server, free_port


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    """Until the HTTP server listens on `port` (fails if it exits first)."""

    def listens() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the HTTP server exited with {proc.returncode}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listens, f"the HTTP server to listen on {port}", timeout)


@pytest.fixture(params=["sse", "json"])
def http_server(request) -> Iterator[str]:
    port = free_port()
    extra = ["--http", str(port)] + (["--json"] if request.param == "json" else [])
    proc = subprocess.Popen(
        demo_server(*extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_session_through_streamable_http(http_server: str, logs: Path) -> None:
    command = [PROXY, "--record", str(logs), "--domain", "demo", "--upstream", http_server]
    with StdioClient(command) as client:
        init = client.initialize()
        assert init["result"]["serverInfo"]["name"] == "stretto-test-demo"
        # Every call after initialize carries the server's Mcp-Session-Id, or it is refused.
        tools = {t["name"] for t in client.list_tools()}
        assert {"lookup", "update", "fail", "slow", "big"} <= tools
        answer = client.call_tool("lookup", {"key": "h1"})
        assert json.loads(result_text(answer))["found"] == "value-of-h1"
        assert client.call_tool("fail", {})["result"]["isError"] is True
        assert client.close() == 0
    (log_path,) = logs.glob("*.jsonl")
    log = read_session_log(log_path)
    assert log.header.server_command == [http_server]
    assert [line.sender for line in log.lines].count("server") == 4
    episode = read_episode(log_path)
    assert [c.name for c in episode.calls()] == ["lookup", "fail"]
    assert episode.tools["update"].kind == "write"


def test_slow_calls_do_not_hold_up_later_ones(http_server: str, logs: Path) -> None:
    # More slow calls than the proxy keeps connections busy for: the fast one still passes.
    slow_ids = list(range(100, 100 + BUSY_CONNECTIONS + 2))
    with StdioClient([PROXY, "--record", str(logs), "--upstream", http_server]) as client:
        client.initialize()
        for request_id in slow_ids:
            slow = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "slow", "arguments": {"delay_ms": 1500}},
            }
            client.send_line(json.dumps(slow).encode() + b"\n")
        fast = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "lookup", "arguments": {"key": "quick"}},
        }
        client.send_line(json.dumps(fast).encode() + b"\n")
        order = [json.loads(client.read_line(20))["id"] for _ in range(len(slow_ids) + 1)]
        client.close()
    assert order[0] == 1 and sorted(order[1:]) == slow_ids


def test_a_burst_is_answered_whole_and_logged_request_first(http_server: str, logs: Path) -> None:
    burst = [f"b{i}" for i in range(300)]
    with StdioClient([PROXY, "--record", str(logs), "--upstream", http_server]) as client:
        client.initialize()
        client.send_line(
            b"".join(b'{"jsonrpc":"2.0","id":"%s","method":"ping"}\n' % i.encode() for i in burst)
        )
        answered = [json.loads(client.read_line(20)) for _ in burst]
        client.close()
    assert sorted(a["id"] for a in answered) == sorted(burst)
    assert all(a["result"] == {} for a in answered)
    (log_path,) = logs.glob("*.jsonl")
    seen: dict[str, str] = {}
    for line in read_session_log(log_path).lines:
        message = line.message if isinstance(line.message, dict) else {}
        if str(message.get("id", "")).startswith("b"):
            # Each request is in the log before its answer.
            assert seen.get(message["id"]) == ("client" if line.sender == "server" else None)
            seen[message["id"]] = line.sender
    assert set(seen) == set(burst) and set(seen.values()) == {"server"}


def test_credentials_in_the_url_are_not_logged(http_server: str, logs: Path) -> None:
    url = http_server.replace("http://", "http://me:hunter2@") + "?token=s3cret&x=1"
    with StdioClient([PROXY, "--record", str(logs), "--upstream", url]) as client:
        client.initialize()
        client.close()
    (log_path,) = logs.glob("*.jsonl")
    header = read_session_log(log_path).header
    assert header.server_command == [
        http_server.replace("http://", "http://<redacted>@") + "?token=<redacted>&x=<redacted>"
    ]
    assert "hunter2" not in log_path.read_text() and "s3cret" not in log_path.read_text()


def test_an_unreachable_upstream_answers_with_an_error(logs: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with StdioClient([PROXY, "--record", str(logs), "--upstream", url]) as client:
        answer = client.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}},
        )
        assert "cannot reach the upstream server" in answer["error"]["message"]
        client.close()
    (log_path,) = logs.glob("*.jsonl")
    assert [line.sender for line in read_session_log(log_path).lines] == ["client", "proxy"]


def test_upstream_and_a_command_together_is_a_usage_error() -> None:
    done = subprocess.run(
        [PROXY, "--upstream", "http://127.0.0.1:1/mcp", "--", "cat"],
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert b"not both" in done.stderr


def test_a_long_answer_reaches_the_host_whole_and_is_logged(http_server: str, logs: Path) -> None:
    # Over STREAM_BYTES: with JSON answers it goes to the host piece by piece as it arrives.
    size = 3 * STREAM_BYTES
    with StdioClient([PROXY, "--record", str(logs), "--upstream", http_server]) as client:
        client.initialize()
        answer = client.call_tool("big", {"size": size})
        after = client.call_tool("lookup", {"key": "after"})
        client.close()
    text = result_text(answer)
    assert len(text) == size and set(text) == {"x"}
    assert json.loads(result_text(after))["found"] == "value-of-after"
    (log_path,) = logs.glob("*.jsonl")
    (logged,) = [
        line.message
        for line in read_session_log(log_path).lines
        if line.sender == "server" and line.message.get("id") == answer["id"]
    ]
    assert logged == answer


def test_a_pretty_printed_answer_becomes_one_line_with_its_text_unchanged() -> None:
    body = '{\r\n  "id": 1,\n  "result": {"text": "café \\n ünïcode"}\n}'.encode()
    line = one_line(body)
    assert b"\n" not in line and b"\r" not in line
    assert json.loads(line) == json.loads(body)
    assert "café".encode() in line  # as the server wrote it, not re-escaped
