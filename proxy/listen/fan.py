"""`stretto-proxy --listen ADDR --servers FILE`: one MCP session of the host's, fronting several
servers as one MCP server (docs/cli.md, "Several servers behind one listening proxy").

Each server is a stdio session of the proxy's own (proxy.listen.piped: the server, its log
written as `--server-name NAME` writes it, with the MCP session as the host session), so each
log is the one a proxy per server would write, and learning merges them as it merges those. This
module sits between the host and those sessions:

- `initialize` goes to every server; the answers are merged (the oldest protocol version, the
  union of capabilities, the servers' instructions each under its name).
- `tools/list` and `prompts/list` go to every server; the host sees `NAME::tool` and
  `NAME::prompt` (the names a flow learned across servers uses). `resources/list` and
  `resources/templates/list` are merged as they are. Paged lists page each server on.
- `tools/call`, `prompts/get` and `completion/complete` (a prompt's) go to the server their
  name's prefix names, the prefix taken off; `resources/read`, `resources/subscribe`,
  `resources/unsubscribe` and `completion/complete` (a resource's) to the server that listed
  the URI. An unknown prefix or URI gets a JSON-RPC error (-32602); a method not named here, -32601.
- `ping` and `logging/setLevel` go to every server; notifications too, but a cancellation,
  which goes where its request went.
- The host's request ids go to the server as they are (a request to every server: the same id
  to each, each answer taken apart); a server's own requests (e.g. `roots/list`) reach the host
  with an id of the proxy's (`stretto-fan-<n>`), and the host's answer goes back with the
  server's. So ids never cross between servers.

The host's bytes reach the server as they are, but for the name whose prefix is taken off; a
server's bytes reach the host as they are, but for merged answers and a server request's id.

With `--flow` one flow run serves the whole session (proxy.serve.flowserver.FlowServer, its
history the host's calls by their `NAME::tool` names): after a call on one server it may look up
on another. Its lookups go straight to their server and are logged there as the proxy's own (as
a proxy per server logs its lookups); the answer it extends is logged, as the proxy's, in the
log of the server that answered the call; its decisions go to one flow log, beside the first
server's log and named after it.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import threading

from proxy.listen.fanmerge import cursors, encoded, initialized, renamed
from proxy.listen.piped import PipedSession
from proxy.record.recorder import parse_json_line
from proxy.serve.flowfeed import FlowFeed
from proxy.serve.flowload import FlowLoader
from proxy.session import say
from proxy.wire import PROXY_ERROR_CODE, id_key, messages
from stretto.logs.hostsession import SEPARATOR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from proxy.listen.servers_file import ServerEntry

INVALID_PARAMS = -32602
NO_SUCH_METHOD = -32601
EVERY_SERVER = ("initialize", "ping", "logging/setLevel")
LISTS = {  # a list every server answers: the key of its items, whether names get the prefix
    "tools/list": ("tools", True),
    "prompts/list": ("prompts", True),
    "resources/list": ("resources", False),
    "resources/templates/list": ("resourceTemplates", False),
}
BY_NAME = ("tools/call", "prompts/get")
BY_URI = ("resources/read", "resources/subscribe", "resources/unsubscribe")


def _params(message: dict) -> dict:
    params = message.get("params")
    return params if isinstance(params, dict) else {}


def _error(request_id: object, code: int, text: str) -> dict:
    message = f"stretto-proxy: {text}"
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


class _Leg:
    """One server behind the session."""

    def __init__(self, entry: ServerEntry) -> None:
        self.name = entry.name
        self.prefix = entry.name + SEPARATOR
        self.piped: PipedSession
        self.over = False

    def send_own(self, line: bytes) -> None:
        """A request of the proxy's own: logged as the proxy's, sent straight to the server."""
        session = self.piped.session
        if session is None:
            return
        if session.log is not None:
            session.log.record("proxy", line, parse_json_line(line))
        session.pump.to_server(line)


class _Gather:
    """A request sent to every server: the answers so far, by server."""

    def __init__(self, message: dict, legs: list[_Leg], own: bool) -> None:
        self.message, self.own = message, own
        self.waiting = {leg.name for leg in legs}
        self.answers: dict[str, dict] = {}


class _FanLog:
    """What the flow loader needs of a session log (proxy.serve.flowload): the flow log goes beside
    the first server's log, named after it; what the flow records goes to the leg it is for."""

    def __init__(self, first, record) -> None:
        self.path, self.session, self.record = first.path, first.session, record


class Fan:
    """The session's servers, as one (the interface of proxy.listen.piped.PipedSession)."""

    def __init__(
        self,
        host_session: str,
        args,
        servers: list[ServerEntry],
        on_line: Callable[[bytes], None],
        on_over: Callable[[int | None], None],
    ) -> None:
        self.host_session, self._args = host_session, args
        self._on_line, self._on_over = on_line, on_over
        self._loop = asyncio.get_running_loop()
        self._lock = threading.RLock()  # the maps below: the loop and the flow's runs share them
        self.legs: dict[str, _Leg] = {}
        for number, entry in enumerate(servers):
            leg = self.legs[entry.name] = _Leg(entry)
            leg_args = copy.copy(args)  # as `stretto-proxy --server-name NAME` is given
            leg_args.server_name, leg_args.servers = entry.name, None
            leg_args.upstream, leg_args.upstream_header = entry.url, entry.upstream_headers()
            leg_args.flow = None  # the session's flow is served here, across the servers
            if number:
                leg_args.retain_days = None  # one sweep of the record folder is enough
            leg.piped = PipedSession(
                host_session,
                leg_args,
                entry.command,
                functools.partial(self._from_leg, leg),
                functools.partial(self._leg_over, leg),
                entry.env,
            )
        self.ended = False
        self.status: int | None = None
        self._single: dict[str, tuple[_Leg, str, bool]] = {}  # id -> leg, method, own
        self._gathers: dict[str, _Gather] = {}
        self._asked: dict[str, tuple[_Leg, object]] = {}  # our id -> a server's request id
        self._asked_count = 0
        self._called: dict[str, _Leg] = {}  # the answered calls a flow run holds
        self._uris: dict[str, _Leg] = {}  # resources the servers listed
        self.feed: FlowFeed | None = None  # with --flow
        self._loader: FlowLoader | None = None

    # starting and ending -------------------------------------------------------------------

    async def start(self) -> str | None:
        """Start every server; None, or why the session cannot start (every server ends)."""
        failures = await asyncio.gather(*(leg.piped.start() for leg in self.legs.values()))
        for leg, failure in zip(self.legs.values(), failures, strict=True):
            if failure is not None:
                self.end()
                return f"{leg.name}: {failure}"
        if self._args.flow:
            self._load_flow()
        return None

    def _leg_over(self, leg: _Leg, status: int | None) -> None:
        """One server's session is over: the host's session ends with it (every other
        server's input closes), and requests waiting on it are answered without it."""
        leg.over = True
        if self.status is None or status:
            self.status = status
        self.end()
        flow = self.feed.flow if self.feed is not None else None
        if flow is not None:
            flow.abandon()  # its lookups will not be answered
        with self._lock:
            gathers = [(key, g) for key, g in self._gathers.items() if leg.name in g.waiting]
        for key, gather in gathers:
            gather.waiting.discard(leg.name)
            self._gathered(key, gather)
        if all(each.over for each in self.legs.values()):
            if flow is not None:
                flow.close()
            self._on_over(self.status)

    def write(self, data: bytes) -> None:
        """The host's line (one message or a batch): each message to its server(s)."""
        line = data.rstrip(b"\r\n")
        parsed = parse_json_line(line)
        if parsed is None:
            return  # listen only sends JSON
        value = parsed[0]
        batch = isinstance(value, list)
        for message in messages(value):
            try:
                self._from_host(message, encoded(message) if batch else line)
            except Exception as exc:  # noqa: BLE001 - one odd message must not end the session
                say(f"session {self.host_session[:8]}: a message of the host's failed: {exc!r}")

    def end(self) -> None:
        self.ended = True
        for leg in self.legs.values():
            leg.piped.end()

    # the host's messages -----------------------------------------------------------------

    def _from_host(self, message: dict, line: bytes) -> None:
        method = message.get("method")
        if "id" not in message or message.get("id") is None:
            if method is None:
                return
            self._notification(message, line)
        elif method is None:
            self._host_answer(message)
        else:
            self._request(message, line, own=False)

    def _request(self, message: dict, line: bytes, own: bool) -> None:
        """Send a request (the host's, or the flow's when `own`) where it goes."""
        method, key = message["method"], id_key(message["id"])
        if method in EVERY_SERVER or method in LISTS:
            self._gather(message, line, own)
            return
        found = self._route(message, line)
        if isinstance(found, dict):  # an error of the proxy's own, at once
            self._deliver(found, encoded(found), own_answer=own)
            return
        leg, sent = found
        if leg.over:
            gone = _error(message["id"], PROXY_ERROR_CODE, f"the server {leg.name} has ended")
            self._deliver(gone, encoded(gone), own_answer=own)
            return
        with self._lock:
            self._single[key] = (leg, method, own)
        if own:
            leg.send_own(sent + b"\n")
            return
        if self.feed is not None:
            self.feed.host(message)
        leg.piped.write(sent + b"\n")

    def _route(self, message: dict, line: bytes) -> tuple[_Leg, bytes] | dict:
        """The server a one-server request goes to and its bytes for it, or the error."""
        method, params = message["method"], _params(message)
        if method in BY_NAME:
            return self._by_name(message, line, params, "name")
        if method in BY_URI:
            return self._by_uri(message, line, params.get("uri"))
        if method == "completion/complete":
            ref = params.get("ref")
            if isinstance(ref, dict) and ref.get("type") == "ref/prompt":
                return self._by_name(message, line, ref, "name")
            if isinstance(ref, dict):
                return self._by_uri(message, line, ref.get("uri"))
        return _error(
            message["id"],
            NO_SUCH_METHOD,
            f"{method}: not served across several servers ({', '.join(self.legs)})",
        )

    def _by_name(self, message: dict, line: bytes, holder: dict, key: str):
        name = holder.get(key)
        server, sep, own_name = name.partition(SEPARATOR) if isinstance(name, str) else ("", "", "")
        leg = self.legs.get(server) if sep and own_name else None
        if leg is None:
            return _error(
                message["id"],
                INVALID_PARAMS,
                f"{name!r}: no such server's name; names are SERVER{SEPARATOR}NAME, "
                f"SERVER one of {', '.join(self.legs)}",
            )
        return leg, renamed(line, message, holder, key, own_name)

    def _by_uri(self, message: dict, line: bytes, uri: object):
        with self._lock:
            leg = self._uris.get(uri) if isinstance(uri, str) else None
        if leg is None:
            return _error(message["id"], INVALID_PARAMS, f"{uri!r}: no server listed this resource")
        return leg, line

    def _gather(self, message: dict, line: bytes, own: bool) -> None:
        """Send a request to every server (a page on: to those with more)."""
        legs, sent = [leg for leg in self.legs.values() if not leg.over], {}
        cursor = _params(message).get("cursor")
        if message["method"] in LISTS and cursor is not None:
            per_server = cursors(cursor)
            if per_server is None or not set(per_server) <= set(self.legs):
                answer = _error(message["id"], INVALID_PARAMS, "a cursor not of this proxy's")
                self._deliver(answer, encoded(answer), own_answer=own)
                return
            legs = [self.legs[name] for name in per_server if not self.legs[name].over]
            for leg in legs:
                params = {**_params(message), "cursor": per_server[leg.name]}
                sent[leg.name] = encoded({**message, "params": params})
        if not legs:
            gone = _error(message["id"], PROXY_ERROR_CODE, "every server has ended")
            self._deliver(gone, encoded(gone), own_answer=own)
            return
        with self._lock:
            self._gathers[id_key(message["id"])] = _Gather(message, legs, own)
        if not own and self.feed is not None:
            self.feed.host(message)
        for leg in legs:
            data = sent.get(leg.name, line) + b"\n"
            if own:
                leg.send_own(data)
            else:
                leg.piped.write(data)

    def _notification(self, message: dict, line: bytes) -> None:
        legs = list(self.legs.values())
        if message["method"] == "notifications/cancelled":
            key = id_key(_params(message).get("requestId"))
            with self._lock:
                single = self._single.get(key)
                gather = self._gathers.get(key)
            if single is not None:
                legs = [single[0]]
            elif gather is not None:
                legs = [self.legs[name] for name in gather.waiting]
        if self.feed is not None:
            self.feed.host(message)
        for leg in legs:
            leg.piped.write(line + b"\n")

    def _host_answer(self, message: dict) -> None:
        """The host answers a server's request: back to it, with its own id."""
        with self._lock:
            asked = self._asked.pop(id_key(message["id"]), None)
        if asked is None:
            say(f"session {self.host_session[:8]}: an answer to no request: {message['id']!r}")
            return
        leg, server_id = asked
        leg.piped.write(encoded({**message, "id": server_id}) + b"\n")

    # the servers' lines ----------------------------------------------------------------------

    def _from_leg(self, leg: _Leg, line: bytes) -> None:
        body = line[:-1] if line.endswith(b"\r") else line
        parsed = parse_json_line(body)
        if parsed is None:
            say(
                f"session {self.host_session[:8]}: a line of {leg.name}'s is not JSON; an "
                "HTTP host cannot be sent it (it is in the log)"
            )
            return
        value = parsed[0]
        batch = isinstance(value, list)
        for message in messages(value):
            self._from_server(leg, message, encoded(message) if batch else body)

    def _from_server(self, leg: _Leg, message: dict, line: bytes) -> None:
        has_id = message.get("id") is not None
        if "method" in message:
            if has_id:  # the server's own request: the host answers our id
                with self._lock:
                    self._asked_count += 1
                    ours = f"stretto-fan-{self._asked_count}"
                    self._asked[id_key(ours)] = (leg, message["id"])
                message = {**message, "id": ours}
                line = encoded(message)
            self._deliver(message, line)
            return
        if not has_id:
            self._deliver(message, line)
            return
        key = id_key(message["id"])
        with self._lock:
            gather = self._gathers.get(key)
            single = self._single.get(key)
            if gather is not None and leg.name in gather.waiting:
                gather.waiting.discard(leg.name)
                gather.answers[leg.name] = message
            elif single is not None and single[0] is leg:
                del self._single[key]
                gather = None
            else:
                gather = single = None
        if gather is not None:
            self._gathered(key, gather)
            return
        if single is not None and single[1] == "tools/call" and not single[2]:
            with self._lock:
                self._called[key] = leg
            self._deliver(message, line, answers_call=True)
            return
        self._deliver(message, line, own_answer=single is not None and single[2])

    def _gathered(self, key: str, gather: _Gather) -> None:
        """Once every server has answered a request sent to all: the one answer."""
        with self._lock:
            if gather.waiting or self._gathers.get(key) is not gather:
                return
            del self._gathers[key]
        answer = self._merged(gather)
        self._deliver(answer, encoded(answer), own_answer=gather.own)

    def _merged(self, gather: _Gather) -> dict:
        request_id, method = gather.message["id"], gather.message["method"]
        answers = [gather.answers[name] for name in self.legs if name in gather.answers]
        results = {  # in the servers file's order
            name: gather.answers[name]["result"]
            for name in self.legs
            if isinstance(gather.answers.get(name, {}).get("result"), dict)
        }
        errors = [m for m in answers if "result" not in m]
        if not results or (method == "initialize" and errors):
            if errors:
                return {**errors[0], "id": request_id}
            return _error(request_id, PROXY_ERROR_CODE, f"{method}: no server answered")
        result: dict = {}
        if method == "initialize":
            result = initialized(results)
        elif method in LISTS:
            result = self._listed(method, results)
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _listed(self, method: str, results: dict[str, dict]) -> dict:
        field, prefixed = LISTS[method]
        items: list = []
        more: dict[str, str] = {}
        for name, result in results.items():
            leg = self.legs[name]
            for item in result.get(field) or []:
                if not isinstance(item, dict):
                    continue
                if prefixed and isinstance(item.get("name"), str):
                    item = {**item, "name": leg.prefix + item["name"]}
                if method == "resources/list" and isinstance(item.get("uri"), str):
                    with self._lock:
                        self._uris[item["uri"]] = leg
                items.append(item)
            if isinstance(result.get("nextCursor"), str):
                more[name] = result["nextCursor"]
        merged: dict = {field: items}
        if more:
            merged["nextCursor"] = json.dumps({"stretto-fan": more}, separators=(",", ":"))
        return merged

    def _deliver(
        self, message: dict, line: bytes, answers_call: bool = False, own_answer: bool = False
    ) -> None:
        """A line for the host: shown to the flow first (which may hold it, or take it: an
        answer to its own request), else sent on."""
        feed = self.feed
        if feed is not None and self._args.flow_shadow and not own_answer:
            self._to_host(line)  # as a shadow flow's relay does: the host first, then the flow
            feed.server(message, line, True, answers_call)
            return
        if feed is not None and feed.server(message, line, False, answers_call or own_answer):
            return
        if own_answer:
            return  # the flow that asked is gone
        self._to_host(line)

    def _to_host(self, line: bytes) -> None:
        """(Any thread) a line to the host's session (proxy.listen.hosted routes it)."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._on_line(line)
        else:
            self._loop.call_soon_threadsafe(self._on_line, line)

    # the flow ------------------------------------------------------------------------------

    def _load_flow(self) -> None:
        first = next(iter(self.legs.values())).piped.session
        if first is None or first.log is None:
            return  # listen wants --record with --flow (proxy.options)
        self.feed = FlowFeed(self._to_host)
        log = _FanLog(first.log, self._record_own)
        self._loader = FlowLoader(self._args, self, self._send_own, log, self._flow_loaded)
        self._loader.start()

    def _flow_loaded(self) -> None:
        self._loop.call_soon_threadsafe(self._attach_flow)

    def _attach_flow(self) -> None:
        loader, feed = self._loader, self.feed
        if loader is None or feed is None:
            return
        if loader.failure is not None:
            say(f"session {self.host_session[:8]}: {loader.failure[1]}; served without it")
            self.feed = None
            feed.drop()
            return
        say(f"serving the flow {self._args.flow} across {', '.join(self.legs)}")
        feed.attach(loader.server)

    def flow_to_host(self, line: bytes) -> None:
        """What the flow's runs send the host (the `relay.flow_to_host` of proxy.serve.flowload)."""
        if self.feed is not None:
            self.feed.to_host(line)
        else:
            self._to_host(line)

    def _send_own(self, line: bytes) -> bool:
        """(A flow run's thread) the flow's own request: a lookup to its server, a tools/list
        to every server."""
        parsed = parse_json_line(line.rstrip(b"\n"))
        if parsed is None or not isinstance(parsed[0], dict):
            return False
        self._loop.call_soon_threadsafe(self._request, parsed[0], line.rstrip(b"\n"), True)
        return True

    def _record_own(self, sender: str, line: bytes, parsed) -> None:
        """What the flow records: its requests are logged by their server as they go
        (_Leg.send_own); an answer it extended, in the log of the server that answered."""
        if parsed is None or not isinstance(parsed[0], dict) or "method" in parsed[0]:
            return
        with self._lock:
            leg = self._called.pop(id_key(parsed[0].get("id")), None)
        session = leg.piped.session if leg is not None else None
        if session is not None and session.log is not None:
            session.log.record(sender, line, parsed)
