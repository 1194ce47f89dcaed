"""`stretto-proxy --listen ADDR`: hosts over Streamable HTTP, each MCP session a stdio session
of its own. The proxy runs as a process (its HTTP endpoint is what is tested); the hosts are
the official MCP SDK's client and plain http.client requests."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from stretto.logs.episode import read_episode
from stretto.logs.sessionlog import read_session_log
from tests.builders import answers_to, learn, slow_connections, until, wait_until, with_descriptors
from tests.conftest import PROXY, SERVERS, filesystem_server

RPC_SERVER = [sys.executable, str(SERVERS / "rpc_server.py")]
TOKEN = "a-test-token"  # the token `listening` gives the proxy, each request sends
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOTH = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}},
}


class Listening:
    def __init__(self, proc: subprocess.Popen, url: str, token: str | None) -> None:
        self.proc, self.url, self.token = proc, url, token
        address = url.split("//")[1].split("/")[0]
        self.host, self.port = address.rsplit(":", 1)

    def said(self) -> str:
        """The second line on stderr: where the token is, or --no-auth's warning."""
        assert self.proc.stderr is not None
        return self.proc.stderr.readline()

    def request(
        self,
        method: str,
        body: bytes | dict | None = None,
        headers: dict[str, str] | None = None,
        session: str | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, headers in lower case, body) of one request to /mcp, with the token
        unless `headers` say `Authorization` (`""`: none)."""
        conn = http.client.HTTPConnection(self.host, int(self.port), timeout=60)
        auth = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        sent = {"Accept": BOTH, "Content-Type": "application/json", **auth, **(headers or {})}
        sent = {name: value for name, value in sent.items() if value}
        if session:
            sent["Mcp-Session-Id"] = session
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        conn.request(method, "/mcp", body=data, headers=sent)
        response = conn.getresponse()
        got = (response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        conn.close()
        return got

    def initialize(self, **headers: str) -> str:
        status, got, _ = self.request("POST", INITIALIZE, headers)
        assert status == 200, status
        return got["mcp-session-id"]

    def stop(self) -> tuple[int, str]:
        """SIGTERM; (exit status, stderr)."""
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


@contextmanager
def listening(
    *options: str,
    server: list[str] = RPC_SERVER,
    env: dict[str, str] | None = None,
    token: str | None = TOKEN,
    descriptors: int | None = None,
) -> Iterator[Listening]:
    """The proxy listening on a free loopback port, asking for `token` (its file made here),
    unless `options` say otherwise (--listen-token-file, --no-auth) or `token` is None (the
    proxy's own default)."""
    with tempfile.TemporaryDirectory() as folder:
        own = "--listen-token-file" in options or "--no-auth" in options or token is None
        if not own:
            Path(folder, "token").write_text(TOKEN + "\n")
            Path(folder, "token").chmod(0o600)  # the owner's alone, or the proxy refuses it
            options = ("--listen-token-file", str(Path(folder, "token")), *options)
        proc = subprocess.Popen(
            [PROXY, "--listen", "127.0.0.1:0", *options, *(["--", *server] if server else [])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=with_descriptors(descriptors) if descriptors else None,
        )
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening on http://" in line, line
        url = line.split("listening on ")[1].strip()
        running = Listening(proc, url, None if own else TOKEN)
        try:
            yield running
        finally:
            if proc.poll() is None:
                status, err = running.stop()
                assert status == 0, err


def sdk_http(authorization: str | None = f"Bearer {TOKEN}", source: str | None = None, **options):
    """The HTTP client the SDK's streamable_http_client is given, sending `authorization`
    (from the loopback address `source`)."""
    import httpx2

    headers = {"Authorization": authorization} if authorization else {}
    options.setdefault("timeout", httpx2.Timeout(60, read=300))
    if source:
        options["transport"] = httpx2.AsyncHTTPTransport(local_address=source)
    return httpx2.AsyncClient(headers=headers, **options)


def sse_data(body: bytes) -> list[bytes]:
    return [line[len(b"data: ") :] for line in body.split(b"\n") if line.startswith(b"data: ")]


def call(request_id: int, name: str, arguments: dict) -> dict:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


# the official client, the real filesystem server ---------------------------------------------


async def a_session(streams, folder: Path) -> dict:
    """What a host sees of a filesystem session (the same calls, direct or proxied)."""
    from mcp import types
    from mcp.client.session import ClientSession

    asked: list[str] = []

    async def roots(_context) -> types.ListRootsResult:
        asked.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri=folder.as_uri(), name="notes")])

    read, write = streams
    async with ClientSession(read, write, list_roots_callback=roots) as session:
        init = await session.initialize()
        tools = await session.list_tools()
        found = await session.call_tool("search_files", {"path": str(folder), "pattern": "*.md"})
        paths = sorted(found.content[0].text.split("\n"))
        texts = []
        for path in paths:
            read_back = await session.call_tool("read_text_file", {"path": path})
            texts.append(read_back.content[0].text)
        outside = await session.call_tool("read_text_file", {"path": "/etc/hostname"})
        await until(lambda: asked, "the server to ask for the roots (after `initialized`)")
        allowed = await session.call_tool("list_allowed_directories", {})
    return {
        "server": init.server_info.name,
        "tools": [t.model_dump() for t in tools.tools],
        "paths": paths,
        "texts": texts,
        "outside_is_error": outside.is_error,
        "asked_for_roots": bool(asked),
        "allowed": allowed.content[0].text,
    }


def test_the_sdk_client_sees_through_the_proxy_what_it_sees_directly(
    tmp_path: Path, logs: Path
) -> None:
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "alpha.md").write_text("# Project alpha\nStatus: on track.\n")
    (notes / "beta.md").write_text("# Project beta\nStatus: late, é ✓.\n")
    command = filesystem_server(notes)

    async def direct() -> dict:
        params = StdioServerParameters(command=command[0], args=command[1:])
        async with stdio_client(params) as streams:
            return await a_session(streams, notes)

    with listening("--record", str(logs), "--domain", "notes", server=command) as proxy:

        async def proxied() -> dict:
            async with (
                sdk_http() as client,
                streamable_http_client(proxy.url, http_client=client) as streams,
            ):
                return await a_session(streams, notes)

        through = anyio.run(proxied)
        status, err = proxy.stop()
        assert status == 0, err
    assert through == anyio.run(direct)
    assert through["texts"][1].endswith("late, é ✓.\n") and through["asked_for_roots"]

    (log_path,) = logs.glob("*.jsonl")
    log = read_session_log(log_path)
    assert log.header.domain == "notes"
    methods = [(line.sender, (line.message or {}).get("method")) for line in log.lines]
    assert ("server", "roots/list") in methods  # the server's own request reached the host
    assert methods[0] == ("client", "initialize")
    episode = read_episode(log_path)
    assert [c.name for c in episode.calls()] == [
        "search_files",
        "read_text_file",
        "read_text_file",
        "read_text_file",
        "list_allowed_directories",
    ]
    assert episode.tools["write_file"].kind == "write"


# a flow, one run per session ------------------------------------------------------------------

APPENDIX = "--- Also looked up automatically (current results; no need to repeat these calls) ---"


def answer_of(proxy: Listening, session: str, message: dict) -> dict:
    status, _, body = proxy.request("POST", message, {"Accept": "application/json"}, session)
    assert status == 200, body
    return json.loads(body)


def a_search(proxy: Listening, notes: Path, pattern: str) -> tuple[str, dict]:
    """A new session that searches the notes; (its id, the search's answer)."""
    session = proxy.initialize()
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert proxy.request("POST", initialized, {}, session)[0] == 202
    answer_of(proxy, session, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    search = call(2, "search_files", {"path": str(notes), "pattern": pattern})
    return session, answer_of(proxy, session, search)


@pytest.mark.slow  # records over HTTP, learns, serves
def test_sessions_recorded_over_http_teach_a_flow_served_to_each_session(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for day in ("08-12", "08-26", "09-03", "09-17", "09-28", "10-05", "10-14", "10-26"):
        (notes / f"2026-{day}.md").write_text(f"# Meeting 2026-{day}\nDecisions of the day.\n")
    fs = filesystem_server(notes)
    recorded = tmp_path / "recorded"
    with listening("--record", str(recorded), "--domain", "notes", server=fs) as proxy:
        for pattern in ("**/2026-08-*", "**/2026-09-*", "**/2026-10-2*", "**/2026-09-1*"):
            session, found = a_search(proxy, notes, pattern)
            paths = sorted(found["result"]["content"][0]["text"].splitlines())
            for number, path in enumerate(paths, 3):
                answer_of(proxy, session, call(number, "read_text_file", {"path": path}))
            assert proxy.request("DELETE", None, {}, session)[0] == 204
    flow = tmp_path / "notes.flow.json"
    done = learn(recorded, flow, tmp_path / "home", domain="notes")
    assert done.returncode == 0, done.stderr

    served = tmp_path / "served"
    with listening("--record", str(served), "--flow", str(flow), server=fs) as proxy:
        _, october = a_search(proxy, notes, "**/2026-10-*")
        _, september = a_search(proxy, notes, "**/2026-09-*")
    for answer, days in ((october, ("10-05", "10-14", "10-26")), (september, ("09-03",))):
        appended = answer["result"]["content"][-1]["text"]
        assert appended.startswith(APPENDIX)
        for day in days:
            assert f'{{"path":"{notes}/2026-{day}.md"}}:\n# Meeting 2026-{day}' in appended
    # one flow log per session, each with its own run
    flow_logs = sorted(served.glob("*.flow.jsonl"))
    assert len(flow_logs) == 2
    for flow_log in flow_logs:
        runs = [json.loads(line) for line in flow_log.read_text().splitlines()]
        assert [r["run"]["call"] for r in runs if "run" in r] == ["search_files"]


# bytes ---------------------------------------------------------------------------------------


def test_each_message_passes_with_its_own_bytes_as_json_or_sse(logs: Path) -> None:
    with listening("--record", str(logs)) as proxy:
        session = proxy.initialize()
        proxy.request(
            "POST", b'{"jsonrpc":"2.0","method":"notifications/initialized"}', {}, session
        )
        odd = (
            b'{ "jsonrpc" : "2.0", "id" : 7, "method":"tools/call",\n'
            b' "params":{"name":"echo","arguments":{"k":"\\u00e9t\\u00e9 \xe2\x9c\x93"}}}'
        )
        status, headers, as_json = proxy.request(
            "POST", odd, {"Accept": "application/json"}, session
        )
        assert status == 200 and headers["content-type"] == "application/json"
        status, headers, as_sse = proxy.request("POST", odd.replace(b"7", b"8"), {}, session)
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        (sse_answer,) = sse_data(as_sse)
    raw = next(logs.glob("*.jsonl")).read_bytes()
    # the log's host session is the MCP session (every session of one proxy shares its env)
    assert json.loads(raw.splitlines()[0])["host_session"] == session
    # The server read the message as it was posted (a line break, white space in JSON, became
    # a space: the server reads lines) ...
    assert b'"message":' + odd.replace(b"\n", b" ") + b"}\n" in raw
    # ... and the host got the server's line, byte for byte, either way.
    assert b'"from":"server","message":' + as_json + b"}\n" in raw
    assert b'"from":"server","message":' + sse_answer + b"}\n" in raw
    assert json.loads(as_json)["id"] == 7 and json.loads(sse_answer)["id"] == 8


def test_what_the_server_says_on_its_own_goes_to_the_get_stream() -> None:
    with listening() as proxy:
        session = proxy.initialize()
        # Without a GET stream: on the SSE answer of the call it came with, before the answer.
        status, _, body = proxy.request("POST", call(1, "notify", {"n": 1}), {}, session)
        said, answer = (json.loads(data) for data in sse_data(body))
        assert said["method"] == "notifications/message" and said["params"]["data"] == {"n": 1}
        assert answer["id"] == 1

        conn = http.client.HTTPConnection(proxy.host, int(proxy.port), timeout=60)
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session, **AUTH}
        conn.request("GET", "/mcp", headers=headers)
        stream = conn.getresponse()
        assert stream.status == 200
        status, _, _ = proxy.request("GET", None, {"Accept": "text/event-stream"}, session)
        assert status == 409  # one GET stream per session
        # With one, and a JSON answer: the answer in the body, the rest on the stream.
        status, _, body = proxy.request(
            "POST", call(2, "notify", {"n": 2}), {"Accept": "application/json"}, session
        )
        assert json.loads(body)["id"] == 2
        while (line := stream.readline()) and not line.startswith(b"data: "):
            pass
        assert json.loads(line[len(b"data: ") :])["params"]["data"] == {"n": 2}
        # The server's own request goes there too; the host answers it with a POST (202).
        asking = http.client.HTTPConnection(proxy.host, int(proxy.port), timeout=60)
        headers = {"Accept": "application/json", "Mcp-Session-Id": session, **AUTH}
        asking.request("POST", "/mcp", body=json.dumps(call(3, "ask", {})), headers=headers)
        while (line := stream.readline()) and not line.startswith(b"data: "):
            pass
        asked = json.loads(line[len(b"data: ") :])
        assert asked["method"] == "roots/list"
        roots = {"jsonrpc": "2.0", "id": asked["id"], "result": {"roots": []}}
        assert proxy.request("POST", roots, {}, session)[0] == 202
        answer = json.loads(asking.getresponse().read())
        assert answer["id"] == 3 and json.loads(answer["result"]["content"][0]["text"]) == {
            "roots": []
        }
        asking.close()
        conn.close()


# the checks ----------------------------------------------------------------------------------


def test_a_token_file_makes_the_bearer_token_required(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    token.chmod(
        0o600
    )  # the owner's alone, or it is refused (tests/proxy/listen/test_token_file.py)
    with listening("--listen-token-file", str(token)) as proxy:
        assert proxy.request("POST", INITIALIZE)[0] == 401
        assert proxy.request("POST", INITIALIZE, {"Authorization": "Bearer wrong"})[0] == 401
        status, headers, _ = proxy.request("POST", INITIALIZE, {"Authorization": "Bearer nope"})
        assert headers["www-authenticate"] == "Bearer"
        for refused in ("Basic s3cret-token", "s3cret-token", "Bearer s3cret-token-and-more"):
            assert proxy.request("POST", INITIALIZE, {"Authorization": refused})[0] == 401
        assert proxy.initialize(Authorization="Bearer s3cret-token")
        # RFC 9110 11.1: the scheme is case-insensitive
        assert proxy.initialize(Authorization="bearer s3cret-token")
        assert proxy.initialize(Authorization="BEARER  s3cret-token")
        said = proxy.said()
        assert f"TOKEN the line in {token}" in said and "made now" not in said


def test_without_a_token_file_one_is_made_and_every_host_must_send_it(tmp_path: Path) -> None:
    """Issue 40, 3: listening on loopback, the proxy asked for no token, so another local user
    read a private file through the proxy's filesystem server. Now a token is asked in every
    mode: without --listen-token-file, the one in $STRETTO_HOME/listen.token (made, 0600)."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    home = tmp_path / "home"
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "key.txt").write_text("the secret\n")
    env = {**os.environ, "STRETTO_HOME": str(home)}

    statuses: list[int] = []

    async def seen(response) -> None:
        statuses.append(response.status_code)

    async def read_key(url: str, authorization: str | None) -> str:
        """An MCP session of the SDK's client: the file it reads through the proxy."""
        async with (
            sdk_http(authorization, event_hooks={"response": [seen]}) as client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            found = await session.call_tool("read_text_file", {"path": str(private / "key.txt")})
            return found.content[0].text

    file = home / "listen.token"
    with listening(server=filesystem_server(private), env=env, token=None) as proxy:
        status, headers, _ = proxy.request("POST", INITIALIZE)
        assert (status, headers.get("www-authenticate")) == (401, "Bearer")
        assert f"TOKEN the line in {file} (made now, 0600)" in proxy.said()
        assert stat.S_IMODE(file.stat().st_mode) == 0o600
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        token = file.read_text().strip()
        assert len(token) == 64
        for wrong in (None, "Bearer not-the-token"):  # the SDK's client: its initialize fails
            with pytest.raises(Exception, match="unhandled errors"):
                anyio.run(read_key, proxy.url, wrong)
            assert statuses == [401]
            statuses.clear()
        assert anyio.run(read_key, proxy.url, f"bearer {token}") == "the secret\n"
        assert statuses and set(statuses) <= {200, 202, 204}
    with listening(server=filesystem_server(private), env=env, token=None) as proxy:
        assert "made now" not in proxy.said()  # the next start keeps the token
        assert anyio.run(read_key, proxy.url, f"Bearer {token}") == "the secret\n"
    given = tmp_path / "given.token"  # a --listen-token-file that is not there is made too
    with listening("--listen-token-file", str(given)) as proxy:
        assert proxy.request("POST", INITIALIZE)[0] == 401
        assert f"TOKEN the line in {given} (made now, 0600)" in proxy.said()
        assert stat.S_IMODE(given.stat().st_mode) == 0o600
        assert proxy.initialize(Authorization=f"Bearer {given.read_text().strip()}")


def test_no_auth_is_only_for_loopback_and_says_what_it_allows() -> None:
    done = subprocess.run(
        [PROXY, "--listen", "0.0.0.0:0", "--no-auth", "--", *RPC_SERVER],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--no-auth: only on a loopback address" in done.stderr
    with listening("--no-auth") as proxy:
        assert "every local user can use the server(s)" in proxy.said()
        assert proxy.initialize()
        assert proxy.request("POST", INITIALIZE, {"Host": "evil.example:80"})[0] == 403


def test_origins_and_hosts_other_than_the_proxys_own_are_refused() -> None:
    with listening() as proxy:
        for header in (
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Host": "evil.example:80"},  # DNS rebinding: a page of evil.example on 127.0.0.1
        ):
            status, _, body = proxy.request("POST", INITIALIZE, header)
            assert status == 403, header
        assert proxy.initialize(Origin=f"http://localhost:{proxy.port}")
        assert proxy.initialize(Origin="http://127.0.0.1:3000")


def test_at_most_64_live_sessions_and_delete_ends_one() -> None:
    with listening() as proxy:
        sessions = [proxy.initialize() for _ in range(64)]
        assert len(set(sessions)) == 64
        status, headers, _ = proxy.request("POST", INITIALIZE)
        assert status == 503 and int(headers["retry-after"]) > 0
        assert proxy.request("DELETE", None, {}, sessions[0])[0] == 204
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        assert proxy.request("POST", ping, {}, sessions[0])[0] == 404
        while (status := proxy.request("POST", INITIALIZE)[0]) == 503:
            pass  # its slot is free once its server has ended
        assert status == 200
        assert proxy.request("POST", ping, {"Accept": "application/json"}, sessions[1])[0] == 200


def test_a_message_over_4_mib_is_refused(logs: Path) -> None:
    with listening("--record", str(logs)) as proxy:
        session = proxy.initialize()
        message = json.dumps(call(1, "echo", {"text": "x" * (4 * 1024 * 1024 - 200)})).encode()
        assert len(message) <= 4 * 1024 * 1024
        status, _, body = proxy.request("POST", message, {"Accept": "application/json"}, session)
        assert status == 200 and len(json.loads(body)["result"]["content"][0]["text"]) > 4_000_000
        too_big = message[:-1] + b" " * 300 + b"}"
        status, _, _ = proxy.request("POST", too_big, {}, session)
        assert status == 413
    # the refused message never reached the server, nor the log
    (log_path,) = logs.glob("*.jsonl")
    assert [line.sender for line in read_session_log(log_path).lines].count("client") == 2


def test_an_idle_session_is_ended(logs: Path) -> None:
    with listening("--record", str(logs), "--listen-idle", "0.005") as proxy:
        session = proxy.initialize()
        assert proxy.proc.stderr is not None
        while "idle for" not in (said := proxy.proc.stderr.readline()):
            assert said, "the proxy ended without ending the idle session"
        assert session[:8] in said  # no request for 0.3 s: ended, its server too
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        assert proxy.request("POST", ping, {}, session)[0] == 404
    (log_path,) = logs.glob("*.jsonl")
    assert read_session_log(log_path).lines[0].message["method"] == "initialize"


def test_with_upstream_each_session_is_one_connection_of_its_own(tmp_path: Path) -> None:
    """A listening proxy in front of another one, as an --upstream server: each session of the
    first is a session of the second."""
    env = {**os.environ, "FAR_AUTH": f"Bearer {TOKEN}"}
    with listening("--record", str(tmp_path / "far")) as far:
        with listening(
            "--record",
            str(tmp_path / "near"),
            "--upstream",
            far.url,
            "--upstream-header",
            "Authorization=FAR_AUTH",
            server=[],
            env=env,
        ) as near:
            sessions = [near.initialize(), near.initialize()]
            for number, session in enumerate(sessions):
                answer = answer_of(near, session, call(number, "echo", {"session": number}))
                assert json.loads(answer["result"]["content"][0]["text"]) == {"session": number}
            status, err = near.stop()
            assert status == 0, err
    for side in ("far", "near"):
        logs = sorted((tmp_path / side).glob("*.jsonl"))
        calls = [
            [line.message["params"]["arguments"] for line in read_session_log(log).lines
             if (line.message or {}).get("method") == "tools/call"]
            for log in logs
        ]  # fmt: skip
        assert sorted(calls, key=str) == [[{"session": 0}], [{"session": 1}]], side


def test_a_server_that_exits_ends_its_session_and_answers_what_waited(logs: Path) -> None:
    crash = [sys.executable, str(SERVERS / "crash_server.py")]
    with listening("--record", str(logs), server=crash) as proxy:
        session, other = proxy.initialize(), proxy.initialize()
        status, _, body = proxy.request("POST", call(1, "crash", {}), {}, session)
        # (the echoed initialize was no answer to the proxy: it is answered too, on this stream)
        (answer,) = [a for a in map(json.loads, sse_data(body)) if a["id"] == 1]
        assert "the MCP server exited (status 3)" in answer["error"]["message"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        while proxy.request("POST", ping, {}, session)[0] != 404:
            pass  # the session is over once its server's last words are forwarded
        assert proxy.request("POST", ping, {"Accept": "application/json"}, other)[0] == 200
    assert len(list(logs.glob("*.jsonl"))) == 2


BRITTLE = [sys.executable, str(SERVERS / "brittle_server.py")]


def test_an_answer_nested_1000_deep_reaches_the_http_host(logs: Path) -> None:
    """Valid JSON past Python's recursion limit is routed to its request like any answer (it
    was dropped: "a line for the host failed: RecursionError", the host left waiting)."""
    with listening("--record", str(logs), server=BRITTLE) as proxy:
        session = proxy.initialize()
        status, _, body = proxy.request("POST", call(1, "deep", {"depth": 1000}), {}, session)
        assert status == 200
        (answer,) = sse_data(body)
        assert answer.startswith(b'{"jsonrpc":"2.0","id":1,"result":{"content":')
        assert answer.endswith(b"[" + b"]" * 1000 + b"}}")


def test_a_request_nested_1000_deep_is_taken_as_json(logs: Path) -> None:
    """A host's valid JSON past Python's recursion limit is forwarded, not refused as a
    parse error (the server's answer, whatever it is, comes back as usual)."""
    nested = "[" * 1000 + "]" * 1000
    body = json.dumps(call(1, "deep", {"depth": 1, "note": "N"})).replace('"N"', nested)
    with listening("--record", str(logs), server=BRITTLE) as proxy:
        session = proxy.initialize()
        status, _, answer = proxy.request("POST", body.encode(), {}, session)
        assert status == 200, answer
        assert b"parse error" not in answer


def test_a_server_dying_mid_line_leaves_the_http_host_the_proxys_error(logs: Path) -> None:
    with listening("--record", str(logs), server=BRITTLE) as proxy:
        session = proxy.initialize()
        status, _, body = proxy.request("POST", call(1, "tear", {}), {}, session)
        assert status == 200
        (answer,) = map(json.loads, sse_data(body))
        assert answer["id"] == 1
        assert "the MCP server exited (status 3)" in answer["error"]["message"]


def test_a_server_that_cannot_start_fails_its_initialize_with_502() -> None:
    with listening(server=["/nonexistent/server"]) as proxy:
        status, _, body = proxy.request("POST", INITIALIZE)
        assert status == 502
        assert "cannot start the server" in json.loads(body)["error"]["message"]


@pytest.mark.slow
def test_slow_connections_neither_starve_the_hosts_nor_stay() -> None:
    """Issue 40, 4 (slowloris): connections that never finished their request line were held
    for ever; 1,100 of them took every descriptor of a proxy allowed 1,024 (a common default),
    and a host got nothing. Now a request's headers have 10 s, one address holds at most part
    of the connections and the next gets a 503 at once: another address is served, and the
    attacker's own gets a clean 503."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def a_host(url: str, source: str) -> str:
        import httpx2

        async with (
            sdk_http(source=source, timeout=httpx2.Timeout(30)) as client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.list_tools()
            echoed = await session.call_tool("echo", {"from": source})
            return echoed.content[0].text

    with listening(descriptors=1024) as proxy:
        with slow_connections(int(proxy.port), 1100) as attackers:  # from 127.0.0.1
            assert json.loads(anyio.run(a_host, proxy.url, "127.0.0.2")) == {"from": "127.0.0.2"}

            def answered() -> tuple | None:
                with contextlib.suppress(ConnectionError):
                    return proxy.request("POST", INITIALIZE)
                return None

            # dropped while 64 503s are under way (each for 1 s at most)
            status, headers, body = wait_until(answered, "an answer", 30, every_s=0.1)
            assert status == 503 and headers["retry-after"] == "5", (status, body)
            assert b"connections from 127.0.0.1 are open" in body
            seen = answers_to(attackers)
        assert seen.get("held") == 0 and sum(seen.values()) == 1100, seen
        assert seen.get("503", 0) > 0 and seen.get("408", 0) > 0, seen  # refused; timed out
        assert proxy.initialize()  # the attacker's address is served again once they are gone


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--listen-idle", "5"], "need --listen"),
        (["--listen", "127.0.0.1:0", "--context", "c.jsonl"], "not with --listen"),
        (["--listen", "127.0.0.1:0", "--listen-idle", "0"], "minutes above 0"),
        (["--no-auth"], "need --listen"),
        (["--listen", "127.0.0.1:0", "--no-auth", "--listen-token-file", "t"], "choose one"),
    ],
)
def test_listen_options_that_cannot_work_are_usage_errors(options: list[str], said: str) -> None:
    done = subprocess.run(
        [PROXY, *options, "--", *RPC_SERVER], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and said in done.stderr


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost:http", "[::1]"])
def test_a_bad_address_is_a_usage_error(address: str) -> None:
    done = subprocess.run(
        [PROXY, "--listen", address, "--", *RPC_SERVER], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "expected HOST:PORT" in done.stderr
