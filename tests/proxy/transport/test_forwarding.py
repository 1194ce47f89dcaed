"""stretto-proxy forwards every line unchanged and records it, over real pipes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from stretto.logs.episode import read_episode
from stretto.logs.sessionlog import read_session_log
from stretto.stdio_client import StdioClient, result_text
from tests.builders import wait_until
from tests.conftest import demo_server, echo_server, filesystem_server, proxy


def only_log(folder: Path) -> Path:
    files = sorted(folder.glob("*.jsonl"))
    assert len(files) == 1, files
    return files[0]


def run_through_echo(lines: list[bytes], logs: Path, *options: str) -> tuple[bytes, Path, int]:
    """Push lines through the proxy to the echo server; what came back, the log, the status."""
    data = b"".join(lines)
    done = subprocess.run(
        proxy("--record", str(logs), *options, server=echo_server()),
        input=data,
        capture_output=True,
        timeout=120,
    )
    return done.stdout, only_log(logs), done.returncode


def test_session_with_the_demo_server_is_forwarded_and_recorded(logs: Path) -> None:
    command = proxy(
        "--record", str(logs), "--domain", "demo", "--agent-model", "m-1", server=demo_server()
    )
    with StdioClient(command) as client:
        init = client.initialize()
        assert init["result"]["serverInfo"]["name"] == "stretto-test-demo"
        tools = {t["name"]: t for t in client.list_tools()}
        assert tools["lookup"]["annotations"]["readOnlyHint"] is True
        ok = client.call_tool("lookup", {"key": "k1"})
        assert json.loads(result_text(ok))["found"] == "value-of-k1"
        failed = client.call_tool("fail", {"reason": "nope"})
        assert failed["result"]["isError"] is True
        assert client.close() == 0

    log_path = only_log(logs)
    log = read_session_log(log_path)
    assert log.header.version == 2
    assert log.header.domain == "demo" and log.header.agent_model == "m-1"
    assert log.header.server_command[-1].endswith("demo_server.py")
    assert log_path.name == f"{log.header.session}.jsonl"
    # every line: initialize, initialized, tools/list, two calls, and four answers
    senders = [line.sender for line in log.lines]
    assert senders.count("client") == 5 and senders.count("server") == 4
    times = [line.t_ms for line in log.lines]
    assert times == sorted(times)
    # each request is logged before its response
    seen_requests = set()
    for line in log.lines:
        if line.sender == "client" and "id" in line.message:
            seen_requests.add(line.message["id"])
        if line.sender == "server" and "id" in line.message:
            assert line.message["id"] in seen_requests
    assert stat.S_IMODE(os.stat(log_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(logs).st_mode) == 0o700

    episode = read_episode(log_path)
    calls = episode.calls()
    assert [(c.name, c.arguments) for c in calls] == [
        ("lookup", {"key": "k1"}),
        ("fail", {"reason": "nope"}),
    ]
    results = episode.results()
    assert not results[calls[0].id].error and results[calls[1].id].error
    assert episode.tools["update"].kind == "write"
    assert episode.agent_model == "m-1"


def test_the_log_embeds_each_server_line_verbatim(logs: Path) -> None:
    with StdioClient(proxy("--record", str(logs), server=demo_server())) as client:
        client.initialize()
        client.send_line(
            b'{"jsonrpc":"2.0","id":"x","method":"tools/call",'
            b'"params":{"name":"lookup","arguments":{"key":"\\u00e9t\\u00e9 \xe2\x9c\x93"}}}\n'
        )
        answer = client.read_line()
        client.close()
    raw = only_log(logs).read_bytes()
    # The answer the host got is in the log byte for byte, not re-serialized.
    assert b'"from":"server","message":' + answer.rstrip(b"\n") + b"}\n" in raw
    assert b'"\\u00e9t\\u00e9 \xe2\x9c\x93"' in raw


def test_batches_notifications_and_non_json_pass_unchanged(logs: Path) -> None:
    lines = [
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"}]\n',
        b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":0.5}}\n',
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}\n',
        b"this is not json\n",
        b'  {"spaced" : true }  \r\n',
        b"NaN\n",
        b"\xff\xfe broken utf-8\n",
        b"\n",
        b'{"last": "no newline"}',
    ]
    out, log_path, status = run_through_echo(lines, logs)
    assert status == 0
    assert out == b"".join(lines)
    log = read_session_log(log_path)
    client_lines = [line for line in log.lines if line.sender == "client"]
    assert len(client_lines) == len(lines)
    assert client_lines[0].message[1]["method"] == "notifications/x"
    assert client_lines[3].raw == "this is not json"
    assert client_lines[4].message == {"spaced": True}
    assert client_lines[5].raw == "NaN"  # not JSON, whatever Python's json module thinks
    assert client_lines[6].raw == "\ufffd\ufffd broken utf-8"
    assert client_lines[7].raw == ""
    assert client_lines[8].message == {"last": "no newline"}


def test_lines_of_sixteen_megabytes_and_more_pass(logs: Path) -> None:
    payload = "y" * (17 * 1024 * 1024)
    big_json = json.dumps(
        {"jsonrpc": "2.0", "method": "notifications/big", "params": {"p": payload}}
    )
    lines = [big_json.encode() + b"\n", b"z" * (16 * 1024 * 1024) + b"\n"]
    out, log_path, status = run_through_echo(lines, logs)
    assert status == 0
    assert out == b"".join(lines)
    log = read_session_log(log_path)
    assert log.lines[0].message["params"]["p"] == payload
    raw_lines = [(line.sender, len(line.raw)) for line in log.lines if line.raw is not None]
    assert sorted(raw_lines) == [("client", 16 * 1024 * 1024), ("server", 16 * 1024 * 1024)]


def test_large_result_from_a_real_server(logs: Path) -> None:
    with StdioClient(proxy("--record", str(logs), server=demo_server())) as client:
        client.initialize()
        answer = client.call_tool("big", {"size": 20_000_000}, timeout=120)
        assert len(result_text(answer)) == 20_000_000
        client.close()
    episode = read_episode(only_log(logs))
    (result,) = episode.results().values()
    assert len(result.content) == 20_000_000


def test_server_stderr_reaches_the_proxy_stderr(tmp_path: Path, logs: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    with StdioClient(proxy("--record", str(logs), server=filesystem_server(notes))) as client:
        client.initialize()
        client.close()
    assert "Secure MCP Filesystem Server running on stdio" in client.stderr_text
    assert f"stretto-proxy: recording to {logs}" in client.stderr_text


def test_filesystem_server_session(tmp_path: Path, logs: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "alpha.md").write_text("# Project alpha\nStatus: on track.\n")
    context = tmp_path / "context.jsonl"
    command = proxy(
        "--record",
        str(logs),
        "--domain",
        "notes",
        "--context",
        str(context),
        server=filesystem_server(notes),
    )
    with StdioClient(command, context_file=context) as client:
        client.initialize()
        tools = {t["name"]: t for t in client.list_tools()}
        assert tools["write_file"]["annotations"]["readOnlyHint"] is False
        client.say("user", "What's the status of project alpha?")
        found = client.call_tool("search_files", {"path": str(notes), "pattern": "*alpha*"})
        path = result_text(found).strip()
        assert path.endswith("alpha.md")
        read = client.call_tool("read_text_file", {"path": path})
        assert "on track" in result_text(read)
        client.say("assistant", "Project alpha is on track.")
        client.close()

    log = read_session_log(only_log(logs))
    kinds = [(line.sender, (line.message or {}).get("method")) for line in log.lines]
    context_at = kinds.index(("context", None))
    first_call = kinds.index(("client", "tools/call"))
    assert context_at < first_call  # the question is logged before the call it led to
    episode = read_episode(only_log(logs))
    assert episode.domain == "notes"
    assert episode.tools["search_files"].kind == "read"
    assert episode.tools["write_file"].kind == "write"
    assert [type(e).__name__ for e in episode.events] == [
        "User",
        "Assistant",
        "ToolResult",
        "Assistant",
        "ToolResult",
        "Assistant",
    ]
    # The closing reply follows the last call; it is logged when the session ends.
    assert episode.events[-1].text == "Project alpha is on track."
    assert log.lines[-1].sender == "context"


def test_credentials_in_the_server_command_are_redacted(logs: Path) -> None:
    lines = [b'{"jsonrpc":"2.0","method":"notifications/x"}\n']
    done = subprocess.run(
        proxy(
            "--record",
            str(logs),
            server=[
                *echo_server(),
                "--api-key",
                "sk-123",
                "--token=abc",
                "GITHUB_TOKEN=ghp_x",
                "Authorization: Bearer tok",
                "--db",
                "demo",
            ],
        ),
        input=b"".join(lines),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0
    header = read_session_log(only_log(logs)).header
    assert header.server_command[2:] == [
        "--api-key",
        "<redacted>",
        "--token=<redacted>",
        "GITHUB_TOKEN=<redacted>",
        "Authorization: Bearer <redacted>",
        "--db",
        "demo",
    ]
    raw = only_log(logs).read_text()
    assert "sk-123" not in raw and "ghp_x" not in raw and 'tok"' not in raw


def test_without_record_nothing_is_written(tmp_path: Path) -> None:
    lines = [b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', b"plain\n"]
    done = subprocess.run(
        proxy(server=echo_server()),
        input=b"".join(lines),
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and done.stdout == b"".join(lines)
    assert list(tmp_path.iterdir()) == []


def test_a_context_line_that_is_not_json_is_kept_as_raw(tmp_path: Path, logs: Path) -> None:
    context = tmp_path / "context.jsonl"
    context.write_text('{"role": "user", "content": "hi"}\nnot json at all\n{"role": "assist')
    with StdioClient(
        proxy("--record", str(logs), "--context", str(context), server=demo_server())
    ) as client:
        client.initialize()
        client.call_tool("lookup", {"key": "a"})
        client.close()
    log = read_session_log(only_log(logs))
    context_lines = [line for line in log.lines if line.sender == "context"]
    assert [line.message or line.raw for line in context_lines] == [
        {"role": "user", "content": "hi"},
        "not json at all",
    ]  # the unfinished last line waits for its newline
    assert "a context line is not JSON" in client.stderr_text


def test_the_log_is_written_while_the_session_runs(logs: Path) -> None:
    """Lines are written in batches, but never wait for the session's end: a quiet session
    has its lines on disk soon after they passed (the proxy flushes by time), a busy one as
    its batches fill up."""
    with StdioClient(proxy("--record", str(logs), server=demo_server())) as client:
        client.initialize()
        log_path = only_log(logs)
        wait_until(lambda: b'"serverInfo"' in log_path.read_bytes(), "initialize in the log", 30)
        for n in range(40):
            client.call_tool("big", {"size": 4000 + n})  # 40 answers of 4 kB: batches fill
        size_while_running = log_path.stat().st_size
        assert size_while_running > 40 * 4000 - 64 * 1024
        assert client.close() == 0
    log = read_session_log(log_path)  # whole, every line
    assert [line.sender for line in log.lines].count("server") == 41
