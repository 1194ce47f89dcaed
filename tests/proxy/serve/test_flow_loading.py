"""`--flow` loads beside the session (proxy.serve.flowload) and what it must see waits for it
(proxy.serve.flowfeed): an agent that calls at once still gets its answer extended, every call
in shadow mode still gets its decision, and a bad flow still ends the session with exit 2
whatever the host and the server do meanwhile."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from stretto.stdio_client import StdioClient, result_text
from tests.builders import learn
from tests.conftest import demo_server, proxy

APPENDIX = "--- Also looked up automatically (current results; no need to repeat these calls) ---"


@pytest.fixture(scope="module")
def chase_flow(tmp_path_factory) -> Path:
    """Learned from sessions where the agent looks up what it found under a key."""
    base = tmp_path_factory.mktemp("chase")
    for n in range(3):
        with StdioClient(proxy("--record", str(base / "logs"), server=demo_server())) as agent:
            agent.initialize()
            agent.list_tools()
            found = json.loads(result_text(agent.call_tool("lookup", {"key": f"k{n}"})))
            agent.call_tool("lookup", {"key": found["found"]})
            agent.close()
    flow = base / "chase.flow.json"
    done = learn(base / "logs", flow, base / "home", domain="demo")
    assert done.returncode == 0, done.stderr
    return flow


def request(request_id: int, method: str, params: dict) -> bytes:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return json.dumps(message).encode() + b"\n"


def all_at_once(logs: Path, flow: Path, *options: str, calls: int = 1) -> list[dict]:
    """initialize, tools/list and `calls` lookups sent at once, before any answer: the
    calls come back before the flow (which starts loading at the first answer) is there."""
    command = proxy("--record", str(logs), "--flow", str(flow), *options, server=demo_server())
    initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    initialized = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
    lines = [request(1, "initialize", initialize), request(2, "tools/list", {})]
    lines += [
        request(10 + n, "tools/call", {"name": "lookup", "arguments": {"key": f"q{n}"}})
        for n in range(calls)
    ]
    with StdioClient(command) as client:
        client.send_line(lines[0])
        client.send_line(initialized)
        for line in lines[1:]:
            client.send_line(line)
        answers = [json.loads(client.read_line(60)) for _ in lines]
        client.close()
    return answers


def test_an_answer_that_comes_before_the_flow_is_held_for_it(chase_flow, tmp_path) -> None:
    answers = all_at_once(tmp_path / "logs", chase_flow)
    (call,) = [a for a in answers if a["id"] == 10]
    appended = call["result"]["content"][-1]["text"]
    assert appended.startswith(APPENDIX)
    assert 'lookup {"key":"value-of-q0"}:' in appended


def test_in_shadow_every_call_gets_its_decision_however_fast(chase_flow, tmp_path) -> None:
    answers = all_at_once(tmp_path / "logs", chase_flow, "--flow-shadow", calls=6)
    calls = [a for a in answers if a["id"] >= 10]
    assert len(calls) == 6 and all(len(a["result"]["content"]) == 1 for a in calls)
    (flow_log,) = (tmp_path / "logs").glob("*.flow.jsonl")
    decisions = [json.loads(line) for line in flow_log.read_text().splitlines()]
    first = [d for d in decisions if d.get("address") == "decide#0"]
    assert sorted(d["after"] for d in first) == list(range(10, 16))
    assert all(d["shadow"] is True for d in first)


def test_a_bad_flow_ends_a_session_whose_host_and_server_say_nothing(tmp_path) -> None:
    bad = tmp_path / "bad.flow.json"
    bad.write_text('{"stretto_flow": 1}')
    command = proxy("--record", str(tmp_path / "logs"), "--flow", str(bad), server=["cat"])
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        status = proc.wait(timeout=60)  # its stdin stays open: the host says nothing
        err = proc.stderr.read()
    finally:
        proc.kill()
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()
    assert status == 2
    assert b"'provenance' is a required property" in err
    assert not (tmp_path / "logs").exists()
