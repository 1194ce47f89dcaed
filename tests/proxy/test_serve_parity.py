"""The proxy and the offline walk see the same session: the history the proxy's FlowServer
keeps while serving a real MCP server equals what stretto.offline.walk and the replay rebuild
from the log it wrote — here on a session where a reply gets no answer.

The proxy runs in-process (its Relay, recorder, context feed and FlowServer, over the demo
server in tests/servers/ on real pipes) so that its history can be read between calls."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from proxy.context import ContextFeed
from proxy.recorder import SessionLog
from proxy.relay import Relay
from proxy.serve import DEFAULT_BUDGET_CHARS, FlowServer
from proxy.upstream_stdio import StdioServer
from stretto.cli.main import main as stretto
from stretto.logs.episode import read_episode
from stretto.model.decide import Decider
from stretto.model.flow import load_flow
from stretto.model.program import FlowDistributions
from stretto.offline.replay import _EpisodeReplay
from stretto.offline.walk import Point, Turn, walk
from tests.conftest import demo_server


class Host:
    """A scripted host: writes the conversation to the context file, sends calls through the
    proxy's relay and reads the answers the proxy hands back."""

    def __init__(self, logs: Path, flow: dict | None = None, **serve) -> None:
        self.context = logs.parent / f"{logs.name}.context.jsonl"
        self.context.write_text("")
        self.server = StdioServer(demo_server())
        self.log = SessionLog(
            str(logs), server_command=["demo"], domain="demo", agent_model=None, started=0.0
        )
        read_fd, write_fd = os.pipe()
        self.answers = os.fdopen(read_fd, "rb")
        self.relay = Relay(self.server, self.log, ContextFeed(str(self.context)), write_fd)
        self._write_fd = write_fd
        self.flow: FlowServer | None = None
        if flow is not None:
            self.flow = FlowServer(
                flow,
                decider=None,
                threshold=0.3,
                per_call=serve.get("per_call", 8),
                per_session=40,
                tools=None,
                log_path=str(logs / f"{self.log.session}.flow.jsonl"),
                shadow=serve.get("shadow", False),
                budget_chars=DEFAULT_BUDGET_CHARS,
                send=self.server.send,
                to_host=self.relay.to_host,
                record=self.log.record,
                session=self.log.session,
            )
            self.relay.flow = self.flow
        self.server.start(self.relay.from_server)
        self.next_id = 1
        self.histories: list[list[str]] = []  # the proxy's, as each answer reached the host
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
        self.notify("notifications/initialized")
        self.request("tools/list", {})

    def say(self, role: str, content: str) -> None:
        with self.context.open("a") as f:
            f.write(json.dumps({"role": role, "content": content}) + "\n")

    def notify(self, method: str) -> None:
        self.relay.from_host(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")

    def request(self, method: str, params: dict) -> dict:
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.next_id += 1
        self.relay.from_host(json.dumps(request).encode() + b"\n")
        answer = json.loads(self.answers.readline())
        assert answer["id"] == request["id"], answer
        return answer

    def call(self, tool: str, **arguments) -> dict:
        answer = self.request("tools/call", {"name": tool, "arguments": arguments})
        if self.flow is not None:
            self.histories.append(list(self.flow.session_view.history))
        return answer

    def close(self) -> Path:
        self.server.close_input()
        assert self.server.wait(30) is not None
        self.server.finish_reading(5)
        self.relay.log_context()  # the conversation's last words, as the proxy does at the end
        self.log.close()
        os.close(self._write_fd)
        self.answers.close()
        if self.flow is not None:
            self.flow.close()
        return Path(self.log.path)


@pytest.fixture(scope="module")
def demo_flow(tmp_path_factory) -> Path:
    """A flow learned from a session in which the agent, four times, looks a key up, then
    looks up what it found, then replies."""
    base = tmp_path_factory.mktemp("parity")
    host = Host(base / "train")
    for n in range(4):
        host.say("user", f"Please check k{n}.")
        host.call("lookup", key=f"k{n}")
        host.call("lookup", key=f"value-of-k{n}")
        host.say("assistant", "Both found.")
    host.close()
    out = base / "demo.flow.json"
    code = stretto(
        ["learn", "--sessions", str(base / "train"), "--domain", "demo", "--habit-only"]
        + ["--out", str(out), "--home", str(base / "home")]
    )
    assert code == 0
    return out


def session(host: Host) -> Path:
    """A reply the user does not answer (the agent goes on), then one they do, then a last
    reply that ends the session."""
    host.say("user", "Please check k7.")
    host.call("lookup", key="k7")
    host.say("assistant", "Found k7; checking k8 too.")  # nobody answers this one
    host.call("lookup", key="k8")
    host.say("assistant", "Here they are.")
    host.say("user", "Thanks.")
    host.call("lookup", key="k9")
    host.say("assistant", "Bye.")
    return host.close()


@pytest.fixture(scope="module")
def served(demo_flow: Path, tmp_path_factory) -> tuple[Path, list[list[str]], list[str]]:
    """The session served by the proxy (one lookup per call): its log, the proxy's history as
    each answer reached the host, and its history at the end."""
    host = Host(tmp_path_factory.mktemp("served"), load_flow(demo_flow), per_call=1)
    log = session(host)
    assert host.flow is not None
    return log, host.histories, list(host.flow.session_view.history)


def walked(log: Path, **options) -> tuple[list[list[str]], list[str]]:
    """The walk's history as each answer went back to the host (after the last answer
    before the agent's next turn), and at the end."""
    w = walk(read_episode(log), **options)
    seen, last = [], None
    for event in w:
        if isinstance(event, Point):
            last = list(event.view.history)
        elif isinstance(event, Turn) and last is not None:
            seen.append(last)
            last = None
    if last is not None:
        seen.append(last)
    return seen, w.view.history


def test_the_proxy_and_the_walk_keep_the_same_history(served) -> None:
    log, histories, proxy_final = served
    # the flow looked up what each lookup found, after each of the agent's calls
    assert histories[0] == ["lookup", "lookup"]
    assert proxy_final == [
        "lookup",
        "lookup",  # the flow's
        "respond (end)",  # the agent went on without the user answering
        "lookup",
        "lookup",
        "respond",  # answered
        "lookup",
        "lookup",
        "respond (end)",  # the session ended on it
    ]
    seen, final = walked(log)
    assert seen == histories
    assert final == proxy_final


def test_the_replay_rebuilds_the_proxys_history(demo_flow: Path, served) -> None:
    """The replay leaves the recorded lookups out and makes its own, as the proxy did."""
    log, _, proxy_final = served
    flow = load_flow(demo_flow)
    replay = _EpisodeReplay(
        read_episode(log),
        Decider(flow, None, 0.3),
        FlowDistributions(flow),
        flow["manifest"]["tools"],
        1,  # per call, as served
        40,
        None,
        0,
    )
    check = replay.replay()
    assert check.flow_lookups == 3
    assert replay.view.history == proxy_final


def test_a_shadow_proxy_and_the_walk_agree(demo_flow: Path, tmp_path: Path) -> None:
    host = Host(tmp_path / "shadow", load_flow(demo_flow), shadow=True)
    log = session(host)
    assert host.histories[0] == ["lookup"]  # decided and logged, nothing looked up
    seen, final = walked(log)
    assert host.flow is not None
    assert seen == host.histories and final == host.flow.session_view.history
    assert final.count("respond (end)") == 2
