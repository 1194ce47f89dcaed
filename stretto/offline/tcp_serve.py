"""`stretto serve`: a flow's decisions over a local TCP port, for harnesses that are not MCP
hosts (../shared/spec/formats.md §5.3).

One query per connection: a JSON line `{"token"?, "task_id", "messages": [τ²-bench messages
ending with a tool result], "agent_model"?}`. The conversation is walked as the proxy would
have seen it (stretto.offline.walk), and the flow decides after its last result as the
proxy's first decision of a run would (stretto.model.decide; the arbiter asks its model
within the timeout). The answer is one JSON line: the decision (`action`, `tool` and `arguments` or
`reason`, `site`, `probs`, `prob`, `binding`, `decider`, and for the arbiter `oracle`,
`predicates`, `key`; with exploration `explore`). A bad query is answered `{"action":
"hand_back", "reason": "bad query: …"}`; once the arbiter's questions are spent, `the flow's N
questions are spent`; anything else that fails, `error: …`.

Who may ask (docs/cli.md "stretto serve"; the rules are stretto.listenauth's, as for the
proxy's --listen): with a token, every query carries it as its `token` field, and a query
without it, or with another, is answered `{"action": "hand_back", "reason": "refused: …"}`
before anything is decided (the oracle's questions are the flow's budget, and the answers
its decisions). A line longer than `max_request_bytes` is refused without being read whole,
and one not complete `request_timeout_s` after the connection was made (a client idle, or
trickling) too, and a connection beyond `max_connections` open at once; after a refusal the
connection is closed.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stretto.listenauth import family_of, same_token, url_host
from stretto.logs.sessionlog import LogError
from stretto.logs.tau2_query import episode_from_messages
from stretto.model import defaults
from stretto.model.decide import Decider, SplitMix64, explore
from stretto.offline.walk import Point, walk
from stretto.oracle.arbiter import arbiter_from_json
from stretto.oracle.judge import ArbiterJudge
from stretto.oracle.oracle import open_oracle
from stretto.oracle.state import Conversation
from stretto.vocabulary import fnv1a64

MAX_REQUEST_BYTES = 8 << 20  # of one query line (without its newline); a longer one is refused
REQUEST_TIMEOUT_S = 30.0  # the query line must be whole this long after the connection is made
DRAIN_S = 1.0  # after a refusal, what the client still sends is read and dropped this long
MAX_CONNECTIONS = 64  # open at once; one more is refused (threads, and the lines they hold)
TOKEN_FILE = "serve.token"  # under the home: the token when --token-file is not given


class BadQuery(ValueError):
    pass


class Refused(ValueError):
    """A query without the server's token (or with another)."""


class LineTooLong(ValueError):
    pass


def content_key(value: Any) -> str:
    """The messages as JSON with every `id`, `call_id` and `usage` left out (the draws'
    seed: the same conversation draws the same, whatever its ids)."""

    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in ("id", "call_id", "usage")}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return json.dumps(strip(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass
class ServeOptions:
    decider: str | None = None  # None: the flow's default (its arbiter, else reach, else habit)
    threshold: float | None = None  # None: the flow's own (served_threshold)
    max_questions: int = 300
    explore: float | None = None
    explore_seed: int = 0
    oracle: str | None = None  # default: the flow's arbiter's model
    cache: str | Path | None = None
    base_url: str | None = None
    oracle_log: str | Path | None = None
    timeout_ms: int = defaults.ORACLE_TIMEOUT_MS
    log: str | Path | None = None


class Decisions:
    """The decisions one `stretto serve` makes (thread-safe: one at a time)."""

    def __init__(self, flow: dict, options: ServeOptions) -> None:
        self.flow, self.options = flow, options
        self.decider = Decider(flow, options.decider, options.threshold)
        self.oracle = None
        if self.decider.kind == "arbiter":
            self.arbiter = arbiter_from_json(flow["arbiter"])
            self.oracle = open_oracle(
                options.oracle or self.arbiter.model,
                cache=options.cache,
                base_url=options.base_url,
                timeout=options.timeout_ms / 1000,
                retries=0,
                log=options.oracle_log,
                replayed=self.arbiter.model,
            )
        self.questions = 0
        self.lock = threading.Lock()
        self._log = (
            os.open(options.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            if options.log
            else None
        )

    def answer(self, line: bytes, token: bytes | None = None) -> dict:
        """The answer to one query line (never raises); with `token`, a query that does not
        carry it is refused before anything is decided."""
        started = time.monotonic()
        try:
            query = _query(line, token)  # outside the lock: a client's JSON holds up no other
            with self.lock:
                answer = self._decide(query)
        except Refused as exc:
            answer = refusal(str(exc))
        except BadQuery as exc:
            answer = {"action": "hand_back", "reason": f"bad query: {exc}"}
        except Exception as exc:  # noqa: BLE001 - the harness gets an answer, always
            answer = {"action": "hand_back", "reason": f"error: {exc}"}
        if self._log is not None:
            logged = {**answer, "ms": round((time.monotonic() - started) * 1000, 1)}
            os.write(self._log, (json.dumps(logged, sort_keys=True) + "\n").encode())
        return answer

    def _decide(self, query: dict) -> dict:
        task = query["task_id"]
        try:
            episode = episode_from_messages(
                query["messages"],
                task_id=task,
                domain=self.flow["manifest"]["domain"],
                agent_model=query.get("agent_model"),
            )
        except LogError as exc:
            raise BadQuery(str(exc)) from None
        judge, transcript = None, None
        if self.oracle is not None:
            judge = ArbiterJudge(
                self.flow, self.oracle, session=task, task=task, arbiter=self.arbiter
            )
            transcript = Conversation()
        points = [
            p
            for p in walk(episode, self.decider.rules.source_tools(), transcript=transcript)
            if isinstance(p, Point)
        ]
        if not points or points[-1].index != len(episode.events) - 1:
            raise BadQuery("the messages do not end with the result of one of the agent's calls")
        if judge is not None and self.questions >= self.options.max_questions:
            return {
                "action": "hand_back",
                "reason": f"the flow's {self.options.max_questions} questions are spent",
            }
        point = points[-1]
        if judge is not None:
            judge.asked = len(points) - 1  # the decision's index: the results before it
        view = point.view
        decision = self.decider.decide(
            view.history,
            point.last,
            view.state,
            every_option=self.options.explore is not None,
            judge=judge.on(view, within=self.options.timeout_ms / 1000) if judge else None,
        )
        self.questions += decision.asked
        record = None
        if self.options.explore is not None and decision.site is not None:
            seed = self.options.explore_seed ^ fnv1a64(f"{task}/{content_key(query['messages'])}")
            decision, record = explore(decision, self.options.explore, SplitMix64(seed))
        return decision_object(decision, self.decider.kind, record)

    def close(self) -> None:
        if self._log is not None:
            os.close(self._log)
            self._log = None


def refusal(why: str) -> dict:
    """The answer to a query refused before it was read as one."""
    return {"action": "hand_back", "reason": f"refused: {why}"}


def _query(line: bytes, token: bytes | None) -> dict:
    try:
        query = json.loads(line)
    except ValueError as exc:
        raise BadQuery(f"not JSON ({exc})") from None
    if not isinstance(query, dict):
        raise BadQuery("expected a JSON object")
    given = query.pop("token", None)
    if token is not None and not same_token(given, token):
        raise Refused("the field `token` is missing or wrong (the line in the server's token file)")
    task = query.get("task_id")
    if isinstance(task, int) and not isinstance(task, bool):
        query["task_id"] = task = str(task)
    if not isinstance(task, str) or not task:
        raise BadQuery("field `task_id`: expected a task id")
    if not isinstance(query.get("messages"), list) or not query["messages"]:
        raise BadQuery("field `messages`: expected a list of τ²-bench messages")
    if "agent_model" in query and not isinstance(query["agent_model"], str):
        raise BadQuery("field `agent_model`: expected a string")
    return query


def decision_object(decision, decider: str, explored: dict | None = None) -> dict:
    """A decision as the flow log's decision line has it, without the proxy's fields."""
    out: dict[str, Any] = {
        "action": decision.action,
        "decider": decider,
        "site": decision.site,
        "probs": decision.probs,
        "prob": decision.prob,
        "binding": decision.binding,
    }
    if decision.action == "lookup":
        out.update(tool=decision.tool, arguments=decision.arguments)
    else:
        out["reason"] = decision.reason
    if decision.asked:
        out.update(oracle=decision.oracle, predicates=decision.predicates, key=decision.key)
    if explored is not None:
        out["explore"] = explored
    return out


def read_line(sock: socket.socket, max_bytes: int, timeout_s: float) -> bytes:
    """The first line `sock` sends (with its newline; without, when the client ends first),
    never holding much more than `max_bytes` of it; LineTooLong when it is longer,
    TimeoutError when it is not whole `timeout_s` after the call."""
    deadline = time.monotonic() + timeout_s
    parts: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(1 << 16)
        if not chunk:
            return b"".join(parts)
        end = chunk.find(b"\n")
        if end >= 0:
            if size + end > max_bytes:
                raise LineTooLong
            parts.append(chunk[: end + 1])
            return b"".join(parts)
        size += len(chunk)
        if size > max_bytes:
            raise LineTooLong
        parts.append(chunk)


class _Handler(socketserver.BaseRequestHandler):
    server: DecisionServer

    def handle(self) -> None:
        server, sock = self.server, self.request
        try:
            line = read_line(sock, server.max_request_bytes, server.request_timeout_s)
        except LineTooLong:
            self._refuse(f"the line is longer than {server.max_request_bytes} bytes")
            return
        except TimeoutError:
            self._refuse(f"no whole query line within {server.request_timeout_s:g} s")
            return
        except OSError:
            return  # the client reset the connection: no one to answer
        self._send(server.decisions.answer(line, server.token))

    def _send(self, answer: dict) -> None:
        text = json.dumps(answer, sort_keys=True, ensure_ascii=False) + "\n"
        self.request.settimeout(self.server.request_timeout_s)  # a client that never reads
        try:
            self.request.sendall(text.encode())
        except OSError:
            pass  # the client has gone

    def _refuse(self, why: str) -> None:
        """Answer the refusal, then read and drop what the client still sends for a while
        (closing with it unread would reset the connection and could lose the answer)."""
        self._send(refusal(why))
        sock = self.request
        try:
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + DRAIN_S
            while (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                if not sock.recv(1 << 16):
                    break
        except OSError:
            pass  # reset, or the time is up: closed all the same


class DecisionServer(socketserver.ThreadingTCPServer):
    """Answers each connection's query line with `decisions`, on a thread of its own; with
    `token` (None: no token is asked), only a query that carries it. Beyond
    `max_connections` open at once, a new one is refused at once (each may hold up to
    `max_request_bytes` for `request_timeout_s`)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        decisions: Decisions,
        token: str | None,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.address_family = family_of(address[0])  # read by the base class as it binds
        super().__init__(address, _Handler)
        self.decisions = decisions
        self.token = token.encode() if token is not None else None
        self.max_request_bytes = max_request_bytes
        self.request_timeout_s = request_timeout_s
        self.max_connections = max_connections
        self.connections = 0  # open now (handled on their threads)
        self._counting = threading.Lock()

    def process_request(self, request, client_address) -> None:
        with self._counting:
            full = self.connections >= self.max_connections
            if not full:
                self.connections += 1
        if full:
            # on the accepting thread: a few bytes into an empty send buffer never block
            answer = refusal(f"{self.max_connections} connections are open: try again later")
            try:
                request.setblocking(False)
                request.send((json.dumps(answer, sort_keys=True) + "\n").encode())
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._counting:
                self.connections -= 1

    @property
    def address(self) -> str:
        host, port = f"{self.server_address[0]!s}", self.server_address[1]
        return f"{url_host(host)}:{port}"
