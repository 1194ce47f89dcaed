"""One listening proxy fronting several servers (`stretto-proxy --listen ADDR --servers FILE`,
issue 17 part 2): two real stdio servers (tests/servers/demo_server.py as `github`,
index_server.py as `docs`) behind one MCP session, reached with the official MCP SDK's
Streamable HTTP client. Each server's log is the one a proxy per server would write, so
learning merges them into one session and learns the cross-server site (after
`github::lookup` the agent searches `docs::search`); that flow, served by the same proxy,
looks up on `docs` after a call on `github` and appends what it found."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from proxy.listen.servers_file import ServersFileError, read_servers
from proxy.serve.splice import APPENDIX
from stretto.logs.sessionlog import read_session_log
from tests.builders import learn, stretto, until
from tests.conftest import PROXY, demo_server, filesystem_server, index_server

SERVERS = {"github": demo_server(), "docs": index_server()}
TOKEN = "a-fan-test-token"  # every listening proxy here asks for it (a file of its own)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOTH = "application/json, text/event-stream"


def servers_file(folder: Path, servers: list[dict] | None = None) -> Path:
    path = folder / "servers.jsonl"
    lines = ["# the servers of one host session"]
    if servers is None:
        servers = [{"name": name, "command": command} for name, command in SERVERS.items()]
    lines += [json.dumps(server) for server in servers]
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def listening(*argv: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`stretto-proxy --listen 127.0.0.1:0 ARGV...` asking for TOKEN, stopped at the end; its
    URL."""
    with tempfile.TemporaryDirectory() as folder:
        token = Path(folder, "token")
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)  # the owner's alone, or the proxy refuses it
        proc = subprocess.Popen(
            [PROXY, "--listen", "127.0.0.1:0", "--listen-token-file", str(token), *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening on http://" in line, line
        try:
            yield line.split("listening on ")[1].strip()
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err


def sdk_http():
    """The HTTP client the SDK's streamable_http_client is given: it sends the token."""
    import httpx2

    return httpx2.AsyncClient(headers=AUTH, timeout=httpx2.Timeout(60, read=300))


def fronting(folder: Path, *options: str) -> contextlib.AbstractContextManager[str]:
    """The proxy listening in front of both servers; its URL."""
    return listening("--servers", str(servers_file(folder)), *options)


def work(url: str, issue: str) -> dict:
    """The agent reads an issue, searches the docs for what it found, reads the first hit (one
    MCP session, the official client); what it saw."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    async def session() -> dict:
        async with (
            sdk_http() as client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as s,
        ):
            init = await s.initialize()
            listed = await s.list_tools()
            issue_answer = await s.call_tool("github::lookup", {"key": issue})
            found = json.loads(issue_answer.content[0].text)["found"]
            # an LLM turn, kept as a pause: the servers' logs are merged in the order of their
            # proxies' clocks, which must see the calls apart (a millisecond or two)
            await anyio.sleep(0.02)  # the next LLM turn, as above
            searched = await s.call_tool("docs::search", {"query": found})
            hit = json.loads(searched.content[0].text)["hits"][0]
            await anyio.sleep(0.02)
            await s.call_tool("docs::fetch", {"id": hit["id"]})
            try:
                await s.call_tool("wiki::search", {"query": found})
                unknown = ""
            except MCPError as exc:  # a JSON-RPC error
                unknown = str(exc)
        return {
            "server": init.server_info.name,
            "instructions": init.instructions,
            "tools": sorted(t.name for t in listed.tools),
            "issue": [c.text for c in issue_answer.content],
            "unknown": unknown,
        }

    return anyio.run(session)


def logs_by_server(folder: Path) -> dict[str, list]:
    found: dict[str, list] = {}
    for path in sorted(folder.glob("*[0-9].jsonl")):
        log = read_session_log(path)
        found.setdefault(log.header.extra["server_name"], []).append((path, log))
    return found


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[dict]]:
    base = tmp_path_factory.mktemp("fan")
    logs = base / "logs"
    with fronting(base, "--record", str(logs), "--domain", "work") as url:
        seen = [work(url, f"issue-{k}") for k in range(4)]
    flow_path = base / "work.flow.json"
    done = learn(logs, flow_path, base / "home", domain="work")
    assert done.returncode == 0, done.stderr
    assert "from 4 sessions" in done.stdout  # 8 logs, 4 MCP sessions
    return base, json.loads(flow_path.read_text()), seen


def test_the_host_sees_one_server_with_every_servers_tools_by_name(learned) -> None:
    _, _, seen = learned
    first = seen[0]
    assert first["server"] == "stretto-proxy (github, docs)"
    assert first["instructions"] == "github: A server for stretto's tests."
    assert {"github::lookup", "github::update", "docs::search", "docs::fetch"} <= set(
        first["tools"]
    )
    assert all(not t.startswith(("github::github", "docs::docs")) for t in first["tools"])
    # an unknown prefix: a JSON-RPC error, no server asked
    assert "'wiki::search': no such server's name" in first["unknown"]


def test_each_server_has_its_own_log_as_a_proxy_per_server_writes_it(learned) -> None:
    base, _, _ = learned
    by_server = logs_by_server(base / "logs")
    assert sorted((name, len(logs)) for name, logs in by_server.items()) == [
        ("docs", 4),
        ("github", 4),
    ]
    pairs = {}
    for name, logs in by_server.items():
        for _, log in logs:
            pairs.setdefault(log.header.extra["host_session"], set()).add(name)
            calls = [
                x.message["params"]["name"]
                for x in log.lines
                if x.sender == "client" and (x.message or {}).get("method") == "tools/call"
            ]
            # the server's own names; the unknown prefix reached no server
            assert calls == (["lookup"] if name == "github" else ["search", "fetch"])
            methods = [(x.sender, (x.message or {}).get("method")) for x in log.lines]
            assert methods[:2] == [("client", "initialize"), ("server", None)]
            assert not [x for x in log.lines if x.sender == "proxy"]
    assert all(names == {"github", "docs"} for names in pairs.values()) and len(pairs) == 4


def test_a_merged_session_learns_the_cross_server_site(learned) -> None:
    _, flow, _ = learned
    sites = {(s["after"], s["failed"]): s["lookups"] for s in flow["sites"]["next"]}
    assert dict(sites[("github::lookup", False)]).get("docs::search") == 4
    (query,) = [s for s in flow["bindings"]["sources"] if s["tool"] == "docs::search"]
    assert [(f["source"], f["path"], f["count"]) for f in query["found"]] == [
        ("github::lookup", "$.found", 4)
    ]


def test_the_flow_looks_up_on_one_server_after_a_call_on_another(learned, tmp_path) -> None:
    base, _, _ = learned
    logs = tmp_path / "served"
    flow_path = base / "work.flow.json"
    with fronting(
        tmp_path, "--record", str(logs), "--domain", "work", "--flow", str(flow_path)
    ) as url:
        seen = work(url, "issue-9")
    (appendix,) = [t for t in seen["issue"] if APPENDIX in t]
    assert 'docs::search {"query":"value-of-issue-9"}' in appendix
    assert "All about value-of-issue-9" in appendix  # docs' answer, appended
    assert 'docs::fetch {"id":"doc-value-of-issue-9"}' in appendix

    by_server = logs_by_server(logs)
    (github_path, github), (_, docs) = by_server["github"][0], by_server["docs"][0]
    # docs' log: the lookup as the proxy's own request, by the server's own name, answered
    own = [x for x in docs.lines if x.sender == "proxy"]
    # the search, and the page it found: the flow goes on from docs::search as learned
    assert [(x.message["method"], x.message["params"]["name"]) for x in own] == [
        ("tools/call", "search"),
        ("tools/call", "fetch"),
    ]
    assert own[0].message["params"]["arguments"] == {"query": "value-of-issue-9"}
    answered = [
        x
        for x in docs.lines
        if x.sender == "server" and x.message.get("id") == own[0].message["id"]
    ]
    assert "All about value-of-issue-9" in json.dumps(answered[0].message)
    # github's log: the server's answer, then the answer the host got, extended
    (extended,) = [x for x in github.lines if x.sender == "proxy"]
    assert APPENDIX in json.dumps(extended.message)
    # one flow log, beside the first server's log: the run after github::lookup
    flow_log = github_path.with_name(github_path.name.removesuffix(".jsonl") + ".flow.jsonl")
    lines = [json.loads(x) for x in flow_log.read_text().splitlines()]
    made = [d for d in lines if d.get("action") == "lookup" and "withheld" not in d]
    assert made[0]["tool"] == "docs::search" and not made[0]["shadow"]


def test_messages_keep_their_bytes_but_the_name_the_prefix_is_taken_from(tmp_path) -> None:
    logs = tmp_path / "logs"
    with fronting(tmp_path, "--record", str(logs)) as url:
        host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)

        def post(body: bytes, session: str | None = None) -> tuple[dict, bytes]:
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            headers = {"Accept": BOTH, "Content-Type": "application/json", **AUTH}
            if session:
                headers["Mcp-Session-Id"] = session
            conn.request("POST", "/mcp", body=body, headers=headers)
            response = conn.getresponse()
            got = {k.lower(): v for k, v in response.getheaders()}, response.read()
            conn.close()
            return got

        init = (
            b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
            b'"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
        )
        headers, _ = post(init)
        session = headers["mcp-session-id"]
        post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', session)
        call = (
            b'{ "jsonrpc": "2.0", "id": "a-1", "method": "tools/call", "params": '
            b'{"name": "docs::search", "arguments": {"query": "caf\\u00e9 docs::search"}} }'
        )
        _, body = post(call, session)
        (answer,) = [x[6:] for x in body.split(b"\n") if x.startswith(b"data: ")]
    (docs_log,) = [p for p, _ in logs_by_server(logs)["docs"]]
    text = docs_log.read_bytes()
    # the host's bytes, but the name; the server's answer as the host got it
    assert call.replace(b'"docs::search", "arguments"', b'"search", "arguments"') in text
    assert answer in text
    assert init in text


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('{"name": "a"}', "servers.jsonl:2: field `command`: give either `command` or `url`"),
        ('{"name": "a::b", "command": "x"}', "servers.jsonl:2: field `name`: 'a::b'"),
        ('{"name": "a", "command": ["x"], "url": "http://h/mcp"}', ":2: field `command`"),
        ('{"name": "a", "command": []}', ":2: field `command`: a list of words"),
        ('{"name": "a", "command": "x", "env": {"K": 1}}', ":2: field `env`"),
        ('{"name": "a", "url": "ftp://h"}', ":2: field `url`"),
        ('{"name": "a", "url": "http://h/mcp", "headers": {"X": ""}}', ":2: field `headers`"),
        ('{"name": "a", "cmd": "x"}', ":2: field `cmd`: unknown"),
        ('{"name": "github", "command": "x"}', ":2: field `name`: 'github' is named on line 1"),
        ("{nope", "servers.jsonl:2: not JSON"),
        ("[1]", "servers.jsonl:2: a server is a JSON object"),
    ],
)
def test_a_malformed_servers_file_names_its_line_and_field(tmp_path, line, said) -> None:
    path = tmp_path / "servers.jsonl"
    path.write_text('{"name": "github", "command": ["x", "y"]}\n' + line + "\n")
    with pytest.raises(ServersFileError, match=None) as caught:
        read_servers(str(path))
    assert said in str(caught.value) and str(path) in str(caught.value)


def test_the_proxy_refuses_a_malformed_servers_file_with_exit_2(tmp_path) -> None:
    path = tmp_path / "servers.jsonl"
    path.write_text('{"name": "docs", "command": "x"}\n\n{"name": "x", "comand": "y"}\n')
    done = subprocess.run(
        [PROXY, "--listen", "127.0.0.1:0", "--servers", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"stretto-proxy: {path}:3: field `comand`: unknown (name, command, args, env, url, headers)"
    )


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--servers", "f.jsonl"], "--servers needs --listen"),
        (["--listen", "127.0.0.1:0", "--servers", "f", "--", "srv"], "--servers names every"),
        (["--listen", "127.0.0.1:0", "--servers", "f", "--server-name", "a"], "--servers names"),
    ],
)
def test_servers_goes_with_listen_and_alone(options: list[str], said: str) -> None:
    done = subprocess.run([PROXY, *options], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and said in done.stderr


def test_a_servers_file_reads_commands_args_env_and_urls(tmp_path) -> None:
    path = tmp_path / "servers.jsonl"
    path.write_text(
        '{"name": "a", "command": "python", "args": ["-m", "srv"], "env": {"K": "v"}}\n'
        '{"name": "b.1", "url": "https://h/mcp", "headers": {"Authorization": "B_AUTH"}}\n'
    )
    a, b = read_servers(str(path))
    assert (a.name, a.command, a.env, a.url) == ("a", ["python", "-m", "srv"], {"K": "v"}, None)
    assert (b.name, b.command, b.url) == ("b.1", [], "https://h/mcp")
    assert b.upstream_headers() == ["Authorization=B_AUTH"]


def test_audit_and_replay_read_the_servers_logs_as_one_session(learned, tmp_path) -> None:
    base, _, _ = learned
    flow = base / "work.flow.json"
    audited = stretto(
        "audit", "--flow", flow, "--sessions", base / "logs", "--out", tmp_path / "audit",
        "--home", tmp_path / "home",
    )  # fmt: skip
    assert audited.returncode == 0, audited.stderr
    replayed = stretto(
        "replay", "--flow", flow, "--sessions", base / "logs", "--format", "json",
        "--home", tmp_path / "home",
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    # 8 logs, 4 episodes: the decision after github::lookup is scored on the merged session
    assert "4 episodes, 8 decisions scored." in audited.stdout
    assert "| github::lookup | 4 | 100.0% |" in audited.stdout
    report = json.loads(replayed.stdout)
    assert [len(e["episode"].split("+")) for e in report["episodes"]] == [2, 2, 2, 2]
    assert all("github::lookup" in e["sites"] for e in report["episodes"])
    # the search after the issue, the page after the search: each answered from the record
    total = report["total"]
    assert (total["flow_lookups"], total["turns_saved"], total["detours"]) == (8, 8, 0)


def test_a_server_over_http_and_a_servers_own_request_through_the_front(tmp_path) -> None:
    """`url` (here another listening proxy in front of the demo server, sent a header named by
    the servers file) beside the filesystem server, whose `roots/list` reaches the host with
    the proxy's id and its answer goes back with the server's."""
    from mcp import types
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n")
    asked: list[str] = []

    async def roots(_context) -> types.ListRootsResult:
        asked.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri=notes.as_uri(), name="notes")])

    async def session(url: str) -> tuple[str, str]:
        async with (
            sdk_http() as client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write, list_roots_callback=roots) as s,
        ):
            await s.initialize()
            looked = await s.call_tool("github::lookup", {"key": "k"})
            await until(lambda: asked, "the server to ask for the roots (after `initialized`)")
            allowed = await s.call_tool("files::list_allowed_directories", {})
        return looked.content[0].text, allowed.content[0].text

    env = {**os.environ, "FAN_TEST_TOKEN": "Bearer not-a-secret", "FAR_AUTH": f"Bearer {TOKEN}"}
    with listening("--record", str(tmp_path / "far"), "--", *demo_server()) as far:
        servers = [
            {
                "name": "github",
                "url": far,
                "headers": {"X-Fan-Test": "FAN_TEST_TOKEN", "Authorization": "FAR_AUTH"},
            },
            {"name": "files", "command": filesystem_server(notes)},
        ]
        servers_path = servers_file(tmp_path, servers)
        with listening(
            "--servers", str(servers_path), "--record", str(tmp_path / "near"), env=env
        ) as url:
            looked, allowed = anyio.run(session, url)
    assert json.loads(looked)["found"] == "value-of-k"
    assert asked and str(notes) in allowed
    by_server = logs_by_server(tmp_path / "near")
    (_, github), (_, files) = by_server["github"][0], by_server["files"][0]
    assert github.header.server_command == [far]  # the URL, as --upstream logs it
    assert "not-a-secret" not in (tmp_path / "near").joinpath(github.path.name).read_text()
    # the server's own request and the host's answer, each with the server's id
    (request,) = [x.message for x in files.lines if (x.message or {}).get("method") == "roots/list"]
    (answer,) = [
        x.message
        for x in files.lines
        if x.sender == "client"
        and "result" in (x.message or {})
        and x.message["id"] == request["id"]
    ]
    assert answer["result"]["roots"][0]["uri"] == notes.as_uri()


def test_a_shadow_flow_across_servers_decides_and_only_logs(learned, tmp_path) -> None:
    base, _, _ = learned
    logs = tmp_path / "shadow"
    flow = str(base / "work.flow.json")
    with fronting(tmp_path, "--record", str(logs), "--flow", flow, "--flow-shadow") as url:
        seen = work(url, "issue-5")
    assert not [t for t in seen["issue"] if APPENDIX in t]  # the server's answer, as it was
    by_server = logs_by_server(logs)
    github_path, _ = by_server["github"][0]
    assert not [x for _, log in by_server["docs"] for x in log.lines if x.sender == "proxy"]
    flow_log = github_path.with_name(github_path.name.removesuffix(".jsonl") + ".flow.jsonl")
    decided = [json.loads(x) for x in flow_log.read_text().splitlines()]
    searched = [d for d in decided if d.get("tool") == "docs::search"]
    assert searched and all(d["shadow"] for d in searched)
    assert searched[0]["arguments"] == {"query": "value-of-issue-5"}
