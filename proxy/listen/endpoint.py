"""`stretto-proxy --listen ADDR`: hosts that speak MCP's Streamable HTTP transport connect to the
proxy at http://ADDR/mcp; each MCP session (`Mcp-Session-Id`) gets a session of its own, as a
stdio host does (proxy.listen.hosted): one server, one log, one flow run.

The endpoint (docs/cli.md "Hosts over HTTP"):

- POST a JSON-RPC message (or batch): without requests, 202; with requests, their answers as
  one JSON body or as an SSE stream (also carrying what the server says meanwhile), as the
  host's `Accept` asks (SSE when it takes both). An `initialize` without `Mcp-Session-Id`
  starts a session, whose id comes back in that header; any other message needs the header
  (400 without, 404 for a session that has ended).
- GET opens the stream of what the server says on its own (one per session: 409 for another);
  DELETE ends the session (the server's input closes, as when a stdio host leaves).
- Each message's JSON goes to the server with the bytes it came with, and each of the
  server's lines comes back with its own (line breaks inside a message, which JSON allows
  only as white space, become spaces: the server reads lines).
- Refused: an `Origin` that is not the proxy's own (403), a `Host` other than a loopback name
  while listening on loopback (403, against DNS rebinding), a missing or wrong bearer token
  (401; the token is asked in every mode but `--no-auth`, which only a loopback address
  takes: else any local user drives the server as the proxy's user), a message over
  MAX_MESSAGE bytes (413), a new session beyond MAX_SESSIONS live ones (503, Retry-After).
- Connections (stretto.httpguard): request headers not complete within HEADER_TIMEOUT_S end
  the connection; beyond the caps on connections in all and from one address, a new one is
  answered 503 and closed, so descriptors stay for the hosts and the sessions' servers.

Imported only in this mode: starlette, uvicorn and asyncio cost a stdio proxy's start-up
more than all the rest of it.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import sys
import time
from urllib.parse import urlsplit

import uvicorn
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from proxy.cjson import loads_strict
from proxy.listen.hosted import END, HostedSession, Reply
from proxy.listen.servers_file import ServersFileError, read_servers
from proxy.options import EXIT_PROXY_FAILED, EXIT_USAGE
from proxy.serve.flowload import check_flow
from proxy.session import say
from proxy.wire import PROXY_ERROR_CODE, is_request, messages
from stretto.home import default_home
from stretto.httpguard import BACKLOG, guarded, limits_for, raise_fd_limit
from stretto.listenauth import (
    family_of,
    is_loopback,
    no_auth_problem,
    same_token,
    split_address,
    token_of,
    url_host,
)

MAX_SESSIONS = 64
MAX_MESSAGE = 4 << 20  # bytes of one POSTed message
RETRY_AFTER_S = 5  # the Retry-After of a 503
DEFAULT_IDLE_MINUTES = 240.0
ENDPOINT = "/mcp"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
KEEP_ALIVE_S = 60  # an idle connection is kept this long (uvicorn's 5 s: hosts pause longer)
SWITCH_S = 0.0005  # Python's switch interval: one loop thread and a thread per session share it
SHUTDOWN_S = 10.0  # after a signal: how long the sessions get to end
TOKEN_FILE = "listen.token"  # under the home: the token when --listen-token-file is not given


def authorized(header: str, token: bytes) -> bool:
    """Whether an Authorization header is `Bearer <token>`: the scheme in any case (RFC 9110
    11.1), the token compared in constant time."""
    scheme, _, credentials = header.strip().partition(" ")
    same = same_token(credentials.strip(), token)
    return same and scheme.lower() == "bearer"


def _hostname(value: str) -> str:
    """The host part of a Host header or an origin, lower case, without brackets or port."""
    netloc = urlsplit(value).netloc if "://" in value else value
    try:
        return (urlsplit(f"//{netloc}").hostname or "").lower()
    except ValueError:
        return ""


def _plain(status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    return Response(text + "\n", status, headers=headers, media_type="text/plain")


def _rpc_error(status: int, request_id: object, text: str) -> Response:
    """A JSON-RPC error of the proxy's own, `text` prefixed with its name."""
    error = {"code": PROXY_ERROR_CODE, "message": f"stretto-proxy: {text}"}
    body = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return Response(json.dumps(body), status, media_type="application/json")


class Hosts:
    """The ASGI app: the /mcp endpoint and the sessions behind it."""

    def __init__(
        self, args, command: list[str], loopback: bool, token: str | None, servers=None
    ) -> None:
        self.args, self.command, self.servers = args, command, servers
        self.loopback = loopback
        self._token = token.encode() if token else None
        self.sessions: dict[str, HostedSession] = {}
        self.idle_s = 60.0 * (args.listen_idle or DEFAULT_IDLE_MINUTES)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return  # no lifespan events to answer
        request = Request(scope, receive)
        response: Response | Events | None = self._refusal(request)
        if response is None:
            if request.method == "POST":
                response = await self._post(request)
            elif request.method == "GET":
                response = self._get(request)
            elif request.method == "DELETE":
                response = self._delete(request)
            else:
                response = _plain(405, "POST, GET or DELETE", {"Allow": "POST, GET, DELETE"})
        await response(scope, receive, send)

    # checks ------------------------------------------------------------------------------

    def _refusal(self, request: Request) -> Response | None:
        if request.url.path != ENDPOINT:
            return _plain(404, f"the MCP endpoint is {ENDPOINT}")
        host = _hostname(request.headers.get("host", ""))
        if self.loopback and host not in LOOPBACK_NAMES:
            return _plain(403, "Host must be localhost, 127.0.0.1 or [::1]")
        origin = request.headers.get("origin")
        if origin is not None:
            seen = _hostname(origin)
            if not seen or not (seen in LOOPBACK_NAMES or (not self.loopback and seen == host)):
                return _plain(403, f"Origin {origin} is not allowed")
        if self._token is not None and not authorized(
            request.headers.get("authorization", ""), self._token
        ):
            return _plain(401, "a bearer token is required", {"WWW-Authenticate": "Bearer"})
        return None

    def _session(self, request: Request) -> HostedSession | Response:
        session_id = request.headers.get("mcp-session-id")
        if not session_id:
            return _plain(400, "Mcp-Session-Id is missing (initialize first)")
        hosted = self.sessions.get(session_id)
        if hosted is None or hosted.ended:
            return _plain(404, "no such session (it has ended): initialize again")
        hosted.last_seen = time.monotonic()
        return hosted

    # POST --------------------------------------------------------------------------------

    async def _post(self, request: Request) -> Response | Events:
        accept = request.headers.get("accept", "")
        stream = "text/event-stream" in accept or "*/*" in accept
        if not stream and "application/json" not in accept:
            return _plain(406, "Accept application/json or text/event-stream")
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_MESSAGE:
            return _plain(413, f"a message may hold at most {MAX_MESSAGE} bytes")
        parts, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_MESSAGE:
                    return _plain(413, f"a message may hold at most {MAX_MESSAGE} bytes")
                parts.append(chunk)
        except ClientDisconnect:
            return _plain(400, "the body was cut short")
        body = b"".join(parts).strip()
        if b"\n" in body or b"\r" in body:
            body = body.replace(b"\r", b" ").replace(b"\n", b" ")
        try:  # at any depth the host sends (cjson falls back to a parser without recursion)
            value = loads_strict(body.decode("utf-8"))
        except (ValueError, StopIteration):
            return _rpc_error(400, None, "the body is not JSON (parse error)")
        if not messages(value):
            return _rpc_error(400, None, "the body is not a JSON-RPC message")

        if "mcp-session-id" not in request.headers:
            found = [m for m in messages(value) if m.get("method") == "initialize"]
            if not found or not is_request(found[0]):
                return _plain(400, "Mcp-Session-Id is missing (initialize first)")
            started = await self._start(found[0]["id"])
            if isinstance(started, Response):
                return started
            hosted = started
        else:
            got = self._session(request)
            if isinstance(got, Response):
                return got
            hosted = got
        headers = {"Mcp-Session-Id": hosted.id}
        reply = hosted.send(body, value, stream)
        if reply is None:
            return Response(status_code=202, headers=headers)
        hosted.busy += 1
        if stream:
            return Events(hosted, reply, busy=True)
        watch = asyncio.ensure_future(_hang_up(request.receive, reply))
        try:
            answers = await _answers(reply)
        finally:
            watch.cancel()
            hosted.busy -= 1
            hosted.forget(reply)
        if not answers:  # the session ended, or the host hung up
            return _plain(404, "the session ended before answering")
        answer = answers[0] if len(answers) == 1 else b"[" + b",".join(answers) + b"]"
        return Response(answer, media_type="application/json", headers=headers)

    async def _start(self, request_id: object) -> HostedSession | Response:
        if len(self.sessions) >= MAX_SESSIONS:
            return _plain(
                503,
                f"{MAX_SESSIONS} sessions are live: try again later",
                {"Retry-After": str(RETRY_AFTER_S)},
            )
        session_id = secrets.token_hex(16)
        hosted = HostedSession(session_id, self.args, self.command, self._ended, self.servers)
        self.sessions[session_id] = hosted
        failure = await hosted.start()
        if failure is not None:
            self.sessions.pop(session_id, None)
            return _rpc_error(502, request_id, f"the session could not start: {failure}")
        return hosted

    def _ended(self, hosted: HostedSession) -> None:
        self.sessions.pop(hosted.id, None)

    # GET and DELETE ------------------------------------------------------------------------

    def _get(self, request: Request) -> Response | Events:
        if "text/event-stream" not in request.headers.get("accept", ""):
            return _plain(406, "GET opens an SSE stream: Accept text/event-stream")
        hosted = self._session(request)
        if isinstance(hosted, Response):
            return hosted
        if hosted.listener is not None:
            return _plain(409, "this session's GET stream is open already")
        return Events(hosted, hosted.listen(), busy=False)

    def _delete(self, request: Request) -> Response:
        hosted = self._session(request)
        if isinstance(hosted, Response):
            return hosted
        hosted.end()
        return Response(status_code=204)

    # idle sessions, the end ----------------------------------------------------------------

    async def reap_idle(self) -> None:
        """End each session that has had no request for --listen-idle."""
        while True:
            await asyncio.sleep(min(60.0, self.idle_s / 4))
            now = time.monotonic()
            for hosted in list(self.sessions.values()):
                if not hosted.busy and now - hosted.last_seen >= self.idle_s and not hosted.ended:
                    say(f"session {hosted.id[:8]} idle for {self.idle_s / 60:g} min: ending it")
                    hosted.end()

    def end_all(self) -> None:
        for hosted in list(self.sessions.values()):
            hosted.end()


async def _answers(reply: Reply) -> list[bytes]:
    answers: list[bytes] = []
    while True:
        body = await reply.queue.get()
        if body is END:
            return answers
        answers.append(body)


class Events:
    """An SSE response: one event per line of the session's that goes to `reply`, until the
    reply is over or the host hangs up. (Plain ASGI: starlette's StreamingResponse costs a
    task group per response, more than the rest of a call's way through the proxy.)"""

    def __init__(self, hosted: HostedSession, reply: Reply, busy: bool) -> None:
        self.hosted, self.reply, self.busy = hosted, reply, busy

    async def __call__(self, scope, receive, send) -> None:
        hosted, reply = self.hosted, self.reply
        watch = asyncio.ensure_future(_hang_up(receive, reply))
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-cache"),
                        (b"mcp-session-id", hosted.id.encode()),
                    ],
                }
            )
            while (body := await reply.queue.get()) is not END:
                event = b"event: message\ndata: " + body + b"\n\n"
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watch.cancel()
            if self.busy:
                hosted.busy -= 1
                hosted.last_seen = time.monotonic()
            hosted.forget(reply)


async def _hang_up(receive, reply: Reply) -> None:
    """End the reply when the host hangs up."""
    while (await receive())["type"] != "http.disconnect":
        pass
    reply.put(END)


class _Server(uvicorn.Server):
    """uvicorn's server, which also ends the sessions when told to stop (their streams end
    with them, so the server can) and waits for them before it returns."""

    def __init__(self, config: uvicorn.Config, hosts: Hosts) -> None:
        super().__init__(config)
        self.hosts = hosts

    def handle_exit(self, sig, frame) -> None:
        self.hosts.end_all()
        super().handle_exit(sig, frame)
        # uvicorn raises the signal again once it has stopped (the process then dies of it);
        # the proxy has stopped as asked, and exits 0.
        self._captured_signals.clear()

    async def serve(self, sockets=None) -> None:
        reaper = asyncio.ensure_future(self.hosts.reap_idle())
        try:
            await super().serve(sockets)
        finally:
            reaper.cancel()
            self.hosts.end_all()
            deadline = time.monotonic() + SHUTDOWN_S
            while self.hosts.sessions and time.monotonic() < deadline:
                await asyncio.sleep(0.02)


def serve(args, command: list[str]) -> int:
    """Listen until SIGTERM or SIGINT; 0, or 2 on a usage error, 125 when it cannot listen."""
    try:
        host, port = split_address(args.listen, "127.0.0.1:8808")
    except ValueError as exc:
        say(str(exc))
        return EXIT_USAGE
    loopback = is_loopback(host)
    problem = no_auth_problem(host, "--listen-token-file") if args.no_auth else None
    if problem:
        say(problem)
        return EXIT_USAGE
    token = file = None
    made = False
    if not args.no_auth:
        try:
            token, file, made = token_of(
                args.listen_token_file, default_home() / TOKEN_FILE, "--listen-token-file"
            )
        except ValueError as exc:
            say(str(exc))
            return EXIT_USAGE
    servers = None
    if args.servers is not None:  # every server the file names, behind each MCP session
        try:
            servers = read_servers(os.path.expanduser(args.servers))
        except ServersFileError as exc:
            say(str(exc))
            return EXIT_USAGE
    if args.flow:
        problem = check_flow(args)
        if problem:
            say(problem)
            return EXIT_USAGE
    sock = socket.socket(family_of(host), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        say(f"cannot listen on {args.listen}: {exc.strerror or exc}")
        sock.close()
        return EXIT_PROXY_FAILED
    sock.listen(BACKLOG)
    bound_port = sock.getsockname()[1]
    shown = url_host(host)
    hosts = Hosts(args, command, loopback, token, servers)
    config = uvicorn.Config(
        hosts,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=int(SHUTDOWN_S),
        server_header=False,
        proxy_headers=False,
        timeout_keep_alive=KEEP_ALIVE_S,
        http=guarded(limits_for(raise_fd_limit())),
        ws="none",
        backlog=BACKLOG,
    )
    server = _Server(config, hosts)
    # A session's thread waiting for Python's lock while the loop works (or the other way
    # round) waits at most this long, not the default 5 ms.
    sys.setswitchinterval(SWITCH_S)
    say(f"listening on http://{shown}:{bound_port}{ENDPOINT}")
    if file is not None:
        new = " (made now, 0600)" if made else ""
        say(f"hosts send 'Authorization: Bearer TOKEN', TOKEN the line in {file}{new}")
    else:
        say("--no-auth: no token is asked: every local user can use the server(s) through it")
    server.run(sockets=[sock])
    return 0
