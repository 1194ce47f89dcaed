"""A promoted flow, served by the real proxy over the real demo server: it acts only at its
promoted sites; at the others it decides, logs the decision as shadow, and forwards the
agent's answer unchanged. The whole loop runs for real: record, learn, record in shadow
mode, promote, serve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretto.logs.merged import read_episodes
from stretto.logs.sessionlog import read_session_log
from stretto.model.flow import load_flow
from stretto.offline.lifecycle.promote import score
from stretto.stdio_client import StdioClient, result_text
from tests.builders import learn, stretto
from tests.conftest import demo_server, proxy

# records exploring and shadow sessions, learns and promotes
pytestmark = pytest.mark.slow

APPENDIX = "--- Also looked up automatically (current results; no need to repeat these calls) ---"


def chase(agent: StdioClient, key: str) -> None:
    """Look a key up, then look up what it was found under, then write."""
    found = json.loads(result_text(agent.call_tool("lookup", {"key": key})))["found"]
    agent.call_tool("lookup", {"key": found})
    agent.call_tool("update", {"key": found, "value": "done"})


def wait(agent: StdioClient) -> None:
    """Ask for `slow` and read what it said back (a new LLM turn: it passes what it read)."""
    slept = result_text(agent.call_tool("slow", {"delay_ms": 1}))
    agent.call_tool("lookup", {"key": slept})


def session(logs: Path, *options: str, flow: Path | None = None):
    flow_options = ("--flow", str(flow), *options) if flow else ()
    command = proxy("--record", str(logs), "--domain", "demo", *flow_options, server=demo_server())
    agent = StdioClient(command)
    agent.initialize()
    agent.list_tools()
    return agent


@pytest.fixture(scope="module")
def promoted(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A flow learned from sessions that chase keys and read what `slow` says, promoted on
    shadow sessions where the agent chases keys but never reads what `slow` says."""
    base = tmp_path_factory.mktemp("promote")
    training = base / "training"
    for n in range(3):
        with session(training) as agent:
            chase(agent, f"k{n}")
            agent.close()
        with session(training) as agent:
            wait(agent)
            agent.close()
    flow = base / "demo.flow.json"
    done = learn(training, flow, base / "home", domain="demo")
    assert done.returncode == 0, done.stderr
    shadow = base / "shadow"
    for n in range(3):
        with session(shadow, "--flow-shadow", flow=flow) as agent:
            chase(agent, f"s{n}")
            agent.call_tool("slow", {"delay_ms": 1})
            agent.call_tool("update", {"key": f"s{n}", "value": "checked"})
            agent.close()
    out = base / "demo.promoted.flow.json"
    done = stretto("promote", "--flow", flow, "--shadow", shadow, "--out", out)
    assert done.returncode == 0, done.stderr
    return flow, shadow, out


def test_promotion_follows_what_the_agent_did_in_shadow(promoted) -> None:
    _, _, out = promoted
    sites = load_flow(out)["promoted"]["sites"]
    assert sites["lookup"]["promoted"] is True
    assert (sites["lookup"]["used"], sites["lookup"]["tasks"]) == (3, 3)
    assert sites["slow"]["promoted"] is False  # the agent never read what slow said
    assert (sites["slow"]["lookups"], sites["slow"]["used"]) == (3, 0)


def test_scoring_decides_as_the_proxy_did_in_shadow(promoted) -> None:
    """The first decision of each run, as scored, is the decision the proxy logged."""
    flow, shadow, _ = promoted
    logged = {}
    for path in sorted(shadow.glob("*.flow.jsonl")):
        session_id = path.name.removesuffix(".flow.jsonl")
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("address") == "decide#0":
                assert entry["shadow"] is True
                logged[(session_id, str(entry["after"]))] = entry
    scored = score(load_flow(flow), read_episodes(shadow), chains=set(), keep_decisions=True)
    mine = {(d["session"], d["after"]): d for d in scored.decisions if d["address"] == "decide#0"}
    # the proxy ran after each of the agent's five calls; scoring skips the last (nothing
    # followed it, so there is nothing to score against)
    assert len(logged) == 15 and len(mine) == 12
    assert set(logged) - set(mine) == {(s, "7") for s, _ in logged}
    for key, ours in mine.items():
        theirs = logged[key]
        assert (ours["site"], ours["action"]) == (theirs["site"], theirs["action"]), key
        assert ours["prob"] == pytest.approx(theirs["prob"], abs=1e-12)
        if theirs["action"] == "lookup":
            assert (ours["tool"], ours["arguments"]) == (theirs["tool"], theirs["arguments"])
        else:
            assert ours["reason"] == theirs["reason"]


def test_a_promoted_flow_acts_only_at_promoted_sites(promoted, tmp_path: Path) -> None:
    _, _, out = promoted
    logs = tmp_path / "logs"
    with session(logs, flow=out) as agent:
        first = agent.call_tool("lookup", {"key": "z1"})
        slow = agent.call_tool("slow", {"delay_ms": 1})
        agent.close()
    (log,) = logs.glob("*[0-9].jsonl")
    flow_log = [
        json.loads(line) for line in log.with_suffix(".flow.jsonl").read_text().splitlines()
    ]
    decisions = [d for d in flow_log if "action" in d]

    # promoted: the proxy looked value-of-z1 up and appended it to the agent's answer
    content = first["result"]["content"]
    assert json.loads(content[0]["text"])["found"] == "value-of-z1"
    assert content[-1]["text"].startswith(APPENDIX)
    assert 'lookup {"key":"value-of-z1"}:\n' in content[-1]["text"]
    assert decisions[0]["site"] == "lookup" and decisions[0]["action"] == "lookup"
    assert decisions[0]["shadow"] is False and "withheld" not in decisions[0]

    # not promoted: decided as usual, logged as shadow, never looked up
    at_slow = [d for d in decisions if d["site"] == "slow"]
    assert len(at_slow) == 1
    assert at_slow[0]["action"] == "lookup" and at_slow[0]["tool"] == "lookup"
    assert at_slow[0]["arguments"] == {"key": "slept 1 ms"}
    assert at_slow[0]["shadow"] is True
    assert at_slow[0]["withheld"] == "the site is not promoted"
    runs = [d for d in flow_log if "run" in d]
    assert runs[-1]["run"]["call"] == "slow" and runs[-1]["run"]["sites"] == [["decide#0", 0, 0.0]]

    # ... and the agent's answer is the server's, unchanged
    lines = read_session_log(log).lines
    answers = [line.message for line in lines if line.sender == "server"]
    from_server = [m for m in answers if isinstance(m, dict) and m.get("id") == slow["id"]]
    assert len(slow["result"]["content"]) == 1
    assert from_server == [slow]
    proxy_lines = [line.message for line in lines if line.sender == "proxy"]
    assert [m.get("id") for m in proxy_lines] == ["stretto-1", first["id"]]  # one lookup only
    assert proxy_lines[0]["params"] == {"name": "lookup", "arguments": {"key": "value-of-z1"}}
