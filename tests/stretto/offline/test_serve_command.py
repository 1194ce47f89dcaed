"""`stretto serve`: one JSON query per TCP connection, answered with the decision the proxy
would make after the conversation's last result — in this process over a real socket, and
once as the command (the ready line, a query, SIGTERM)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stretto.offline.tcp_serve import Decisions, DecisionServer, ServeOptions
from stretto.oracle.arbiter import Fold, new_arbiter
from stretto.oracle.scores import Rates

STRETTO = str(Path(sys.executable).parent / "stretto")
GREETING = {"role": "assistant", "content": "Hi! How can I help you today?"}
ASKED = {"role": "user", "content": "My email is c1@example.com; where is my order?"}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": "a1", "name": "find_user_id_by_email", "arguments": {"email": "c1@example.com"}}
    ],
}
RESULT = {"role": "tool", "id": "a1", "content": "user_1"}
MESSAGES = [GREETING, ASKED, CALL, RESULT]


@pytest.fixture
def arbiter_flow(shop_flow_path, tmp_path) -> Path:
    flow = json.loads(shop_flow_path.read_text())
    fold = Fold([1.0, 1.0, 0.5, 0.0, 0.5], Rates(), 10)
    flow["arbiter"] = new_arbiter(model="simulate://habit", folds=[fold]).to_json()
    path = tmp_path / "shop.flow.json"
    path.write_text(json.dumps(flow))
    return path


def ask(address: tuple[str, int], query) -> dict:
    with socket.create_connection(address) as conn:
        line = query if isinstance(query, bytes) else json.dumps(query).encode()
        conn.sendall(line + b"\n")
        return json.loads(conn.makefile("rb").readline())


class Serving:
    def __init__(self, flow: Path, options: ServeOptions) -> None:
        self.decisions = Decisions(json.loads(flow.read_text()), options)
        self.server = DecisionServer(("127.0.0.1", 0), self.decisions)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> tuple[str, int]:
        self.thread.start()
        return self.server.server_address[:2]

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.decisions.close()


def test_a_query_gets_the_proxys_decision(arbiter_flow, tmp_path) -> None:
    log = tmp_path / "answers.jsonl"
    options = ServeOptions(cache=tmp_path / "cache", log=log)
    with Serving(arbiter_flow, options) as address:
        answer = ask(address, {"task_id": "12", "messages": MESSAGES})
        again = ask(address, {"task_id": 12, "messages": MESSAGES})
    assert answer == again  # the same query, the same decision (from the cache the second time)
    assert answer["action"] == "lookup" and answer["tool"] == "get_user_details"
    assert answer["arguments"] == {"user_id": "user_1"} and answer["decider"] == "arbiter"
    assert answer["site"] == "find_user_id_by_email" and len(answer["key"]) == 64
    assert set(answer["oracle"]) == {"get_user_details", "respond"}
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [{k: v for k, v in a.items() if k != "ms"} for a in logged] == [answer, again]
    assert all(a["ms"] >= 0 for a in logged)
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 1


def test_bad_queries_and_spent_questions(arbiter_flow, tmp_path) -> None:
    options = ServeOptions(cache=tmp_path / "cache", max_questions=1, decider="arbiter")
    with Serving(arbiter_flow, options) as address:
        bad = [
            ask(address, b"{not json"),
            ask(address, {"messages": MESSAGES}),
            ask(address, {"task_id": "1", "messages": MESSAGES[:2]}),
            ask(address, {"task_id": "1", "messages": [{"role": "robot"}]}),
        ]
        first = ask(address, {"task_id": "1", "messages": MESSAGES})
        spent = ask(address, {"task_id": "2", "messages": MESSAGES})
    reasons = [b["reason"] for b in bad]
    assert reasons[0].startswith("bad query: not JSON")
    assert reasons[1] == "bad query: field `task_id`: expected a task id"
    assert reasons[2] == (
        "bad query: the messages do not end with the result of one of the agent's calls"
    )
    assert reasons[3].startswith("bad query: query: field `simulations[0].messages[0].role`")
    assert first["action"] == "lookup"
    assert spent == {"action": "hand_back", "reason": "the flow's 1 questions are spent"}


def test_exploring_and_the_habit_decider(arbiter_flow, tmp_path) -> None:
    options = ServeOptions(decider="habit", explore=0.0)
    with Serving(arbiter_flow, options) as address:
        answer = ask(address, {"task_id": "7", "messages": MESSAGES})
    assert answer["decider"] == "habit" and "key" not in answer
    explored = answer["explore"]
    assert explored["epsilon"] == 0.0 and explored["propensity"] == 1.0
    assert [o["tool"] for o in explored["options"]] == ["get_user_details"]


def test_the_command_says_where_it_listens_and_stops_on_sigterm(arbiter_flow, tmp_path) -> None:
    command = [STRETTO, "serve", "--flow", str(arbiter_flow), "--oracle", "simulate://habit"]
    command += ["--oracle-cache", str(tmp_path / "cache")]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as served:
        ready = served.stderr.readline()
        assert (
            ready.startswith("stretto: flow ready on 127.0.0.1:") and "(arbiter decider)" in ready
        )
        host, port = ready.split(" on ")[1].split(" ")[0].rsplit(":", 1)
        answer = ask((host, int(port)), {"task_id": "3", "messages": MESSAGES})
        served.send_signal(signal.SIGTERM)
        rest = served.stderr.read()
        assert served.wait(timeout=30) == 0
    assert answer["action"] == "lookup"
    assert rest == "stretto: stopped after 1 questions\n"


def test_a_decider_the_flow_cannot_serve_is_refused(shop_flow_path) -> None:
    done = subprocess.run(
        [STRETTO, "serve", "--flow", str(shop_flow_path), "--decider", "arbiter"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "this flow has no arbiter" in done.stderr
