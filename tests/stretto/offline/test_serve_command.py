"""`stretto serve`: one JSON query per TCP connection, answered with the decision the proxy
would make after the conversation's last result — in this process over a real socket, and
as the command (the ready line, the token file, a query, SIGTERM). Only a query carrying the
token is answered; a line too long, or not whole in time, is refused and its connection
closed; the command listens without a token, or off loopback, only when told to."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stretto.cli import main
from stretto.offline.tcp_serve import Decisions, DecisionServer, ServeOptions
from stretto.oracle.arbiter import Fold, new_arbiter
from stretto.oracle.scores import Rates
from tests.builders import wait_until

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
TOKEN = "0123456789abcdef" * 4
REFUSED = "refused: the field `token` is missing or wrong (the line in the server's token file)"


@pytest.fixture
def arbiter_flow(shop_flow_path, tmp_path) -> Path:
    flow = json.loads(shop_flow_path.read_text())
    fold = Fold([1.0, 1.0, 0.5, 0.0, 0.5], Rates(), 10)
    flow["arbiter"] = new_arbiter(model="simulate://habit", folds=[fold]).to_json()
    path = tmp_path / "shop.flow.json"
    path.write_text(json.dumps(flow))
    return path


def ask(address: tuple[str, int], query, token: str | None = TOKEN) -> dict:
    """One query (a dict carrying `token`, unless None; or bytes as they are) and its answer;
    the connection is then closed by the server."""
    if isinstance(query, dict) and token is not None:
        query = {**query, "token": token}
    with socket.create_connection(address, timeout=60) as conn:
        line = query if isinstance(query, bytes) else json.dumps(query).encode()
        conn.sendall(line + b"\n")
        reader = conn.makefile("rb")
        answer = json.loads(reader.readline())
        assert reader.read() == b""  # closed after the one answer
        return answer


class Serving:
    def __init__(
        self,
        flow: Path,
        options: ServeOptions,
        token: str | None = TOKEN,
        host: str = "127.0.0.1",
        **limits,
    ) -> None:
        self.decisions = Decisions(json.loads(flow.read_text()), options)
        self.server = DecisionServer((host, 0), self.decisions, token, **limits)
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


def test_it_listens_on_an_ipv6_loopback_address(arbiter_flow, tmp_path) -> None:
    """`--listen [::1]:PORT` (stretto.listenauth.split_address's host `::1`) binds an IPv6
    socket, named with brackets as it is given."""
    serving = Serving(arbiter_flow, ServeOptions(cache=tmp_path / "cache"), host="::1")
    with serving as address:
        answer = ask(address, {"task_id": "12", "messages": MESSAGES})
    assert serving.server.address == f"[::1]:{address[1]}"
    assert answer["action"] == "lookup" and answer["tool"] == "get_user_details"


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


def test_exploring_and_the_habit_decider_without_a_token(arbiter_flow, tmp_path) -> None:
    options = ServeOptions(decider="habit", explore=0.0)
    with Serving(arbiter_flow, options, token=None) as address:
        answer = ask(address, {"task_id": "7", "messages": MESSAGES}, token=None)
        ignored = ask(address, {"task_id": "7", "messages": MESSAGES}, token="any")
    assert answer == ignored  # no token asked: one sent is dropped
    assert answer["decider"] == "habit" and "key" not in answer
    explored = answer["explore"]
    assert explored["epsilon"] == 0.0 and explored["propensity"] == 1.0
    assert [o["tool"] for o in explored["options"]] == ["get_user_details"]


def test_a_query_without_the_token_is_refused_and_nothing_decided(arbiter_flow, tmp_path) -> None:
    log = tmp_path / "answers.jsonl"
    options = ServeOptions(cache=tmp_path / "cache", log=log, decider="arbiter")
    query = {"task_id": "5", "messages": MESSAGES}
    serving = Serving(arbiter_flow, options)
    with serving as address:
        refused = [
            ask(address, query, token=None),
            ask(address, query, token=TOKEN[:-1]),
            ask(address, query, token=TOKEN + "0"),
            ask(address, {**query, "token": 12}, token=None),
            ask(address, {**query, "token": [TOKEN]}, token=None),
        ]
        questions_refused = serving.decisions.questions
        answered = ask(address, query)
    assert refused == [{"action": "hand_back", "reason": REFUSED}] * len(refused)
    assert questions_refused == 0 and serving.decisions.questions == 1
    assert answered["action"] == "lookup" and answered["decider"] == "arbiter"
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 1  # the one answered query
    logged = log.read_text()
    assert TOKEN not in logged and logged.count(REFUSED) == len(refused)


def test_an_over_long_line_is_refused_and_the_server_goes_on(arbiter_flow, tmp_path) -> None:
    options = ServeOptions(decider="habit")
    with Serving(arbiter_flow, options, max_request_bytes=1024) as address:
        with socket.create_connection(address, timeout=60) as conn:
            conn.sendall(b'{"task_id": "' + b"x" * (1 << 20) + b'"}\n')
            conn.shutdown(socket.SHUT_WR)
            reader = conn.makefile("rb")
            refused = json.loads(reader.readline())
            assert reader.read() == b""  # closed
        answered = ask(address, {"task_id": "7", "messages": MESSAGES})
        exact = json.dumps({"task_id": "7", "messages": MESSAGES, "token": TOKEN})
        padded = exact + " " * (1024 - len(exact.encode()))
        at_the_cap = ask(address, padded.encode())
        over = ask(address, (padded + " ").encode())
    assert refused == {
        "action": "hand_back",
        "reason": "refused: the line is longer than 1024 bytes",
    }
    assert answered["action"] == "lookup" and at_the_cap == answered
    assert over == refused


def test_a_connection_that_sends_no_whole_line_in_time_is_closed(arbiter_flow, tmp_path) -> None:
    options = ServeOptions(decider="habit")
    with Serving(arbiter_flow, options, request_timeout_s=0.3) as address:
        closed = []
        for sent in (b"", b'{"task_id": "7", "mess'):  # idle; a line begun, never ended
            with socket.create_connection(address, timeout=60) as conn:
                conn.sendall(sent)
                reader = conn.makefile("rb")
                closed.append((json.loads(reader.readline()), reader.read()))
        answered = ask(address, {"task_id": "7", "messages": MESSAGES})
    refused = {"action": "hand_back", "reason": "refused: no whole query line within 0.3 s"}
    assert closed == [(refused, b""), (refused, b"")]
    assert answered["action"] == "lookup"


def test_a_connection_beyond_the_cap_is_refused_at_once(arbiter_flow, tmp_path) -> None:
    options = ServeOptions(decider="habit")
    serving = Serving(arbiter_flow, options, max_connections=1)
    with serving as address:
        with socket.create_connection(address, timeout=60) as held:
            wait_until(lambda: serving.server.connections == 1, "the held connection counted")
            with socket.create_connection(address, timeout=60) as beyond:
                reader = beyond.makefile("rb")
                refused = json.loads(reader.readline()), reader.read()
            held.sendall(
                json.dumps({"task_id": "7", "messages": MESSAGES, "token": TOKEN}).encode()
            )
            held.sendall(b"\n")
            held_answer = json.loads(held.makefile("rb").readline())
        wait_until(lambda: serving.server.connections == 0, "the held connection let go")
        answered = ask(address, {"task_id": "7", "messages": MESSAGES})
    reason = "refused: 1 connections are open: try again later"
    assert refused == ({"action": "hand_back", "reason": reason}, b"")
    assert held_answer == answered and answered["action"] == "lookup"


def serve_command(flow: Path, home: Path, *options: str) -> subprocess.Popen:
    command = [STRETTO, "serve", "--flow", str(flow), "--oracle", "simulate://habit"]
    command += ["--home", str(home), *options]
    return subprocess.Popen(command, stderr=subprocess.PIPE, text=True)


def ready_address(ready: str) -> tuple[str, int]:
    host, port = ready.split(" on ")[1].split(" ")[0].rsplit(":", 1)
    return host, int(port)


def test_the_command_says_where_it_listens_and_stops_on_sigterm(arbiter_flow, tmp_path) -> None:
    """The token file is made under the home, 0600, and named (never the token); the next
    start reads the same file."""
    home = tmp_path / "home"
    token_file = home / "serve.token"
    said = []
    for _start in range(2):
        with serve_command(arbiter_flow, home) as served:
            ready = served.stderr.readline()
            assert ready.startswith("stretto: flow ready on 127.0.0.1:"), ready
            assert "(arbiter decider)" in ready
            where = served.stderr.readline()
            token = token_file.read_text().strip()
            address = ready_address(ready)
            refused = ask(address, {"task_id": "3", "messages": MESSAGES}, token=None)
            answer = ask(address, {"task_id": "3", "messages": MESSAGES}, token=token)
            served.send_signal(signal.SIGTERM)
            rest = served.stderr.read()
            assert served.wait(timeout=30) == 0
        said.append((where, token))
        assert refused == {"action": "hand_back", "reason": REFUSED}
        assert answer["action"] == "lookup"
        assert rest == "stretto: stopped after 1 questions\n"
        assert token not in ready + where + rest
    assert oct(os.stat(token_file).st_mode & 0o777) == oct(0o600) and len(said[0][1]) == 64
    assert said[0][1] == said[1][1]  # the same token, read again
    line = f'stretto: queries carry "token": TOKEN, TOKEN the line in {token_file}'
    assert [w for w, _ in said] == [f"{line} (made now, 0600)\n", f"{line}\n"]


def test_the_command_without_a_token_on_loopback(arbiter_flow, tmp_path) -> None:
    with serve_command(arbiter_flow, tmp_path / "home", "--no-auth") as served:
        address = ready_address(served.stderr.readline())
        warned = served.stderr.readline()
        answer = ask(address, {"task_id": "3", "messages": MESSAGES}, token=None)
        served.send_signal(signal.SIGTERM)
        served.stderr.read()
        assert served.wait(timeout=30) == 0
    assert warned == "stretto: --no-auth: no token is asked: every local user can ask the flow\n"
    assert answer["action"] == "lookup"
    assert not (tmp_path / "home" / "serve.token").exists()


def serve_refused(capsys, *argv: str) -> str:
    """What `stretto serve ARGV` says on stderr, refusing to start (exit 2)."""
    assert main(["serve", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    return err


def test_a_token_file_others_may_read_is_refused(shop_flow_path, tmp_path, capsys) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    token.chmod(0o644)
    said = serve_refused(capsys, "--flow", str(shop_flow_path), "--token-file", str(token))
    assert said == (
        f"stretto: --token-file {token}: other users may read or write it (mode 0644); "
        f"make it the owner's alone: chmod 600 {token}\n"
    )


def test_off_loopback_only_when_asked_and_never_without_a_token(
    shop_flow_path, tmp_path, capsys
) -> None:
    flow = ["--flow", str(shop_flow_path), "--home", str(tmp_path / "home")]
    no_auth = serve_refused(capsys, *flow, "--listen", "0.0.0.0:0", "--no-auth")
    also = serve_refused(capsys, *flow, "--listen", "0.0.0.0:0", "--no-auth", "--allow-remote")
    remote = serve_refused(capsys, *flow, "--listen", "192.168.1.10:7600")
    both = serve_refused(capsys, *flow, "--no-auth", "--token-file", str(tmp_path / "t"))
    assert (
        no_auth
        == also
        == (
            "stretto: --no-auth: only on a loopback address (127.0.0.1, ::1, localhost), not "
            "0.0.0.0: give --token-file\n"
        )
    )
    assert remote == (
        "stretto: --listen 192.168.1.10: not a loopback address, so other machines could ask "
        "the flow and spend its questions; give --allow-remote to serve them (with the token)\n"
    )
    assert both == "stretto: --no-auth and --token-file: choose one\n"
    assert not (tmp_path / "home").exists()  # nothing made for a refused start


def test_a_decider_the_flow_cannot_serve_is_refused(shop_flow_path) -> None:
    done = subprocess.run(
        [STRETTO, "serve", "--flow", str(shop_flow_path), "--decider", "arbiter"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "this flow has no arbiter" in done.stderr
