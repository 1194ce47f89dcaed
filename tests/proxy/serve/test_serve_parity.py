"""The proxy and the offline walk see the same session: the history the proxy's FlowServer
keeps while serving a real MCP server equals what stretto.offline.walk and the replay rebuild
from the log it wrote — here on a session where a reply gets no answer.

The proxy runs in-process (its Relay, recorder, context feed and FlowServer, over the demo
server in tests/servers/ on real pipes) so that its history can be read between calls."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from proxy.record.context import ContextFeed
from proxy.record.recorder import SessionLog
from proxy.relay import Relay
from proxy.serve.flowserver import FlowServer
from proxy.transport.pump import Pump
from proxy.transport.upstream_stdio import StdioServer
from stretto.cli.main import main as stretto
from stretto.logs.episode import read_episode
from stretto.model import defaults
from stretto.model.decide import Decider
from stretto.model.flow import load_flow
from stretto.model.program import FlowDistributions
from stretto.offline.reports.replay import EpisodeReplay
from stretto.offline.walk import Point, Turn, walk
from tests.builders import wait_until
from tests.conftest import demo_server


class CountingRelay(Relay):
    """The relay, noting the answers it has accounted for: the flow sees each answer then,
    which in shadow mode is after the host has it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.accounted: set[object] = set()  # the ids of the answers

    def account_server(self, line, parsed, t_ns, forwarded) -> bool:
        forward = super().account_server(line, parsed, t_ns, forwarded)
        if parsed is not None and isinstance(parsed[0], dict):
            self.accounted.add(parsed[0].get("id"))
        return forward


class Host:
    """A scripted host: writes the conversation to the context file, sends calls to the proxy's
    loop (proxy.transport.pump, on a thread of its own, over real pipes) and reads the answers
    it hands back."""

    def __init__(self, logs: Path, flow: dict | None = None, **serve) -> None:
        self.context = logs.parent / f"{logs.name}.context.jsonl"
        self.context.write_text("")
        self.server = StdioServer(demo_server())
        self.log = SessionLog(
            str(logs), server_command=["demo"], domain="demo", agent_model=None, started=0.0
        )
        host_in, self._to_proxy = os.pipe()
        answers, host_out = os.pipe()
        self.answers = os.fdopen(answers, "rb")
        self._host_fds = (host_in, host_out)
        self.relay = CountingRelay(
            self.server, self.log, ContextFeed(str(self.context)), to_host=self._to_host
        )
        self.relay.hold_server_lines = flow is not None and not serve.get("shadow", False)
        self.flow: FlowServer | None = None
        self._flow, self._serve = flow, serve
        self._ready = threading.Event()
        self._loop = threading.Thread(target=self._run, daemon=True)
        self._loop.start()
        assert self._ready.wait(30)
        self.next_id = 1
        self.histories: list[list[str]] = []  # the proxy's, as each answer reached the host
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
        self.notify("notifications/initialized")
        self.request("tools/list", {})

    def _to_host(self, line: bytes) -> bool:
        return self.pump.to_host(line)

    def _run(self) -> None:
        """The proxy's loop, built on the thread that runs it (as proxy.cli does)."""
        host_in, host_out = self._host_fds
        self.pump = pump = Pump(self.relay, self.server, host_in=host_in, host_out=host_out)
        self.relay.host_has_all = pump.drained
        if self._flow is not None:
            self.relay.expect_flow()
            self.flow = FlowServer(
                self._flow,
                decider=None,
                threshold=0.3,
                per_call=self._serve.get("per_call", 8),
                per_session=40,
                tools=None,
                log_path=str(Path(self.log.path).parent / f"{self.log.session}.flow.jsonl"),
                shadow=self._serve.get("shadow", False),
                budget_chars=defaults.BUDGET_CHARS,
                send=pump.to_server,
                to_host=self.relay.flow_to_host,
                record=self.log.record,
                session=self.log.session,
            )
            self.relay.attach_flow(self.flow)
        self._ready.set()
        pump.run_until(lambda: pump.host_eof)
        pump.close_server_input()
        pump.run_until(lambda: pump.server_status is not None and pump.output_closed, 30)
        wait_until(lambda: not self.relay.flow_busy(), "the flow's lookups to end", every_s=0.005)
        pump.run_until(pump.drained, 5)
        pump.close()
        os.close(host_in)
        os.close(host_out)

    def say(self, role: str, content: str) -> None:
        with self.context.open("a") as f:
            f.write(json.dumps({"role": role, "content": content}) + "\n")

    def _send(self, message: dict) -> None:
        os.write(self._to_proxy, json.dumps(message).encode() + b"\n")

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method})

    def request(self, method: str, params: dict) -> dict:
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.next_id += 1
        self._send(request)
        answer = json.loads(self.answers.readline())
        assert answer["id"] == request["id"], answer
        return answer

    def call(self, tool: str, **arguments) -> dict:
        answer = self.request("tools/call", {"name": tool, "arguments": arguments})
        if self.flow is not None:
            # the flow has seen the answer, and its lookups after the call are over
            wait_until(
                lambda: answer["id"] in self.relay.accounted and not self.relay.flow_busy(),
                "the flow to see the answer and end its lookups",
                every_s=0.005,
            )
            self.histories.append(list(self.flow.session_view.history))
        return answer

    def close(self) -> Path:
        os.close(self._to_proxy)  # the host hangs up
        self._loop.join(60)
        assert not self._loop.is_alive()
        self.relay.log_context()  # the conversation's last words, as the proxy does at the end
        self.log.close()
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
    replay = EpisodeReplay(
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
