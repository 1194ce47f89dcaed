"""Several servers in one host session (issue 17, part 2): two real proxies over real pipes,
each wrapping a real server (tests/servers/demo_server.py as `github`, index_server.py as
`docs`), one host session named by STRETTO_SESSION. Learning merges their logs into one
session, so the flow learns the cross-server site (after `github::lookup` the agent searches
`docs::search` with what the lookup found); over stdio each proxy then serves its own
server's lookups and logs the other server's as shadow decisions."""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from proxy.serve.flowserver import OTHER_SERVER
from proxy.serve.splice import APPENDIX
from stretto.logs.sessionlog import read_session_log
from stretto.stdio_client import StdioClient, result_text
from tests.builders import learn
from tests.conftest import demo_server, index_server, proxy

SERVERS = {"github": demo_server(), "docs": index_server()}


def host_session(logs: Path, name: str, *options: str) -> dict[str, StdioClient]:
    """Both servers' proxies, started as a host starts them: same STRETTO_SESSION."""
    env = {**os.environ, "STRETTO_SESSION": name}
    return {
        server: StdioClient(
            proxy(
                "--record",
                str(logs),
                "--domain",
                "work",
                "--server-name",
                server,
                *options,
                server=command,
            ),
            env=env,
        )
        for server, command in SERVERS.items()
    }


def think() -> None:
    """An agent's pause between calls (an LLM turn takes seconds): logs are merged in the
    order of the proxies' clocks, whose resolution is a millisecond or two."""
    time.sleep(0.02)


def work(agents: dict[str, StdioClient], issue: str) -> tuple[dict, dict]:
    """The agent reads an issue, searches the docs for what it found, reads the first hit."""
    for agent in agents.values():
        agent.initialize()
        agent.list_tools()
    issue_answer = agents["github"].call_tool("lookup", {"key": issue})
    found = json.loads(result_text(issue_answer).split("\n")[0])
    think()
    searched = agents["docs"].call_tool("search", {"query": found["found"]})
    hit = json.loads(result_text(searched).split("\n")[0])["hits"][0]
    think()
    agents["docs"].call_tool("fetch", {"id": hit["id"]})
    return issue_answer, searched


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    base = tmp_path_factory.mktemp("several")
    logs = base / "logs"
    for k in range(4):
        with ExitStack() as stack:
            agents = host_session(logs, f"host-{k}")
            for agent in agents.values():
                stack.enter_context(agent)
            work(agents, f"issue-{k}")
            for agent in agents.values():
                assert agent.close() == 0, agent.stderr_text
    flow_path = base / "work.flow.json"
    done = learn(logs, flow_path, base / "home", domain="work")
    assert done.returncode == 0, done.stderr
    assert "from 4 sessions" in done.stdout  # 8 logs, 4 host sessions
    return base, json.loads(flow_path.read_text())


def test_the_header_names_the_server_and_the_host_session(learned) -> None:
    base, _ = learned
    headers = [read_session_log(p).header for p in sorted((base / "logs").glob("*[0-9].jsonl"))]
    assert sorted((h.extra["server_name"], h.extra["host_session"]) for h in headers) == sorted(
        (server, f"host-{k}") for k in range(4) for server in SERVERS
    )


def test_a_merged_host_session_learns_the_cross_server_site(learned) -> None:
    _, flow = learned
    tools = flow["manifest"]["tools"]
    assert tools["github::lookup"] == "read" and tools["github::update"] == "write"
    assert tools["docs::search"] == tools["docs::fetch"] == "read"
    sites = {(s["after"], s["failed"]): s["lookups"] for s in flow["sites"]["next"]}
    assert dict(sites[("github::lookup", False)]).get("docs::search") == 4
    assert dict(sites[("docs::search", False)]).get("docs::fetch") == 4
    (query,) = [s for s in flow["bindings"]["sources"] if s["tool"] == "docs::search"]
    assert query["arg"] == "query"
    assert [(f["source"], f["path"], f["count"]) for f in query["found"]] == [
        ("github::lookup", "$.found", 4)
    ]


def test_over_stdio_each_proxy_serves_its_own_servers_lookups(learned, tmp_path: Path) -> None:
    base, flow = learned
    flow_path = base / "work.flow.json"
    logs = tmp_path / "logs"
    with ExitStack() as stack:
        agents = host_session(logs, "host-served", "--flow", str(flow_path))
        for agent in agents.values():
            stack.enter_context(agent)
        issue_answer, searched = work(agents, "issue-9")
        for agent in agents.values():
            assert agent.close() == 0, agent.stderr_text
    # github's proxy decided docs::search after the issue, and only logged it
    texts = [c["text"] for c in issue_answer["result"]["content"]]
    assert not any(APPENDIX in t for t in texts)
    by_server = {}
    for log in logs.glob("*[0-9].jsonl"):
        header = read_session_log(log).header
        flow_log = log.with_suffix(".flow.jsonl").read_text().splitlines()
        by_server[header.extra["server_name"]] = (log, [json.loads(x) for x in flow_log])
    decisions = [d for d in by_server["github"][1] if d.get("tool") == "docs::search"]
    assert decisions and all(d["shadow"] and d["withheld"] == OTHER_SERVER for d in decisions)
    assert decisions[0]["arguments"] == {"query": "value-of-issue-9"}
    # docs' proxy made its own lookup, docs::fetch, by the server's own name
    (appendix,) = [c["text"] for c in searched["result"]["content"] if APPENDIX in c["text"]]
    assert 'fetch {"id":"doc-value-of-issue-9"}' in appendix
    lines = read_session_log(by_server["docs"][0]).lines
    made = [
        x.message["params"]["name"] for x in lines if x.sender == "proxy" and "method" in x.message
    ]
    assert made == ["fetch"]
