"""Session logs as episodes: the conversation, the tool calls grouped into LLM turns, their
results, and the server's tool list (docs/formats.md, "From a log to an episode")."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stretto.sessionlog import SessionLog, list_session_logs, read_session_log
from stretto.toollist import ToolInfo, tools_from_result

# A client call within this many ms of its turn's last result may belong to the same LLM turn.
SAME_TURN_MS = 500
# Shorter values are too common to say the agent read them in a result.
MIN_VALUE_CHARS = 2


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    sent_ms: int
    by_proxy: bool = False  # a lookup the flow made, not the agent's own call
    cancelled: bool = False


@dataclass
class User:
    text: str
    t_ms: int = 0


@dataclass
class Assistant:
    """One LLM turn: a reply (no calls) or the tool calls it made together."""

    text: str | None
    calls: list[ToolCall]
    t_ms: int = 0


@dataclass
class ToolResult:
    call_id: str
    name: str
    error: bool
    content: str
    t_ms: int = 0
    by_proxy: bool = False


Event = User | Assistant | ToolResult


@dataclass
class Episode:
    id: str
    domain: str
    agent_model: str
    events: list[Event]
    task_id: str = ""
    trial: int = 0
    reward: float = 0.0
    tools: dict[str, ToolInfo] = field(default_factory=dict)
    # per call id: how many results of its turn had come back when it was sent
    sent_after_results: dict[str, int] = field(default_factory=dict)
    source: str = ""

    @property
    def succeeded(self) -> bool:
        return self.reward >= 1 - 1e-9

    def calls(self) -> list[ToolCall]:
        return [c for e in self.events if isinstance(e, Assistant) for c in e.calls]

    def results(self) -> dict[str, ToolResult]:
        return {e.call_id: e for e in self.events if isinstance(e, ToolResult)}


def call_id_text(value: Any) -> str:
    """A JSON-RPC id as text: a string as-is, a number in decimal."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def result_content(result: Any) -> str:
    """The text items joined by newlines; else structuredContent as JSON; else the result."""
    if isinstance(result, dict):
        content = result.get("content")
        if isinstance(content, list):
            texts = [
                item["text"]
                for item in content
                if isinstance(item, dict)
                and item.get("type") == "text"
                and isinstance(item.get("text"), str)
            ]
            if texts:
                return "\n".join(texts)
        if "structuredContent" in result:
            return compact(result["structuredContent"])
    return compact(result)


def scalar_values(value: Any, out: set[str]) -> None:
    """Every string or number in a JSON value, as text, at least MIN_VALUE_CHARS long."""
    if isinstance(value, dict):
        for item in value.values():
            scalar_values(item, out)
    elif isinstance(value, list):
        for item in value:
            scalar_values(item, out)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, str | int | float):
        text = value if isinstance(value, str) else compact(value)
        if len(text) >= MIN_VALUE_CHARS:
            out.add(text)


def text_values(text: str) -> set[str]:
    """The values a result's text offers: its JSON leaves, or the text and its lines."""
    out: set[str] = set()
    try:
        scalar_values(json.loads(text), out)
        return out
    except ValueError:
        pass
    for piece in [text, *text.splitlines()]:
        piece = piece.strip()
        if len(piece) >= MIN_VALUE_CHARS:
            out.add(piece)
    return out


@dataclass
class _Turn:
    event: Assistant
    open: int = 0
    results: int = 0
    last_result_ms: int | None = None
    said_since: bool = False
    new_values: set[str] = field(default_factory=set)


class _EpisodeBuilder:
    def __init__(self, log: SessionLog) -> None:
        self.log = log
        self.events: list[Event] = []
        self.pending: dict[str, tuple[ToolCall, _Turn]] = {}
        self.turn: _Turn | None = None
        self.known: set[str] = set()
        self.said = ""  # everything said so far, one text to search
        self.tool_list_requests: set[str] = set()
        self.tools: dict[str, ToolInfo] = {}
        self.client_name: str | None = None
        self.sent_after: dict[str, int] = {}

    def build(self) -> Episode:
        for line in self.log.lines:
            if not line.is_json:
                continue
            if line.sender == "context":
                self._context(line.message, line.t_ms)
                continue
            value = line.message
            for message in value if isinstance(value, list) else [value]:
                if isinstance(message, dict):
                    self._message(line.sender, message, line.t_ms)
        header = self.log.header
        return Episode(
            id=header.session,
            domain=header.domain or "mcp",
            agent_model=header.agent_model or self.client_name or "unknown",
            events=self.events,
            tools=self.tools,
            sent_after_results=self.sent_after,
            source=str(self.log.path),
        )

    # conversation --------------------------------------------------------------------------

    def _context(self, message: Any, t_ms: int) -> None:
        if not isinstance(message, dict):
            return
        role, content = message.get("role"), message.get("content")
        text = (
            content if isinstance(content, str) else ("" if content is None else compact(content))
        )
        if role == "user":
            self.events.append(User(text, t_ms))
        elif role == "assistant" and text.strip():
            self.events.append(Assistant(text, [], t_ms))
            self._end_turn()
        else:
            return
        self.said += text + "\n"
        if self.turn is not None:
            self.turn.said_since = True

    def _end_turn(self) -> None:
        if self.turn is not None:
            self.known |= self.turn.new_values
        self.turn = None

    # wire messages -------------------------------------------------------------------------

    def _message(self, sender: str, message: dict, t_ms: int) -> None:
        method = message.get("method")
        if sender in ("client", "proxy") and isinstance(method, str):
            if method == "tools/call" and message.get("id") is not None:
                self._call(sender, message, t_ms)
            elif method == "tools/list" and message.get("id") is not None:
                self.tool_list_requests.add(call_id_text(message["id"]))
            elif method == "initialize" and sender == "client":
                info = (message.get("params") or {}).get("clientInfo") or {}
                if isinstance(info, dict) and isinstance(info.get("name"), str):
                    self.client_name = info["name"]
            elif method == "notifications/cancelled" and sender == "client":
                params = message.get("params") or {}
                if isinstance(params, dict) and "requestId" in params:
                    self._cancel(call_id_text(params["requestId"]))
        elif sender in ("server", "proxy") and method is None and "id" in message:
            if "result" in message or "error" in message:
                self._response(sender, message, t_ms)

    def _call(self, sender: str, message: dict, t_ms: int) -> None:
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        name = params.get("name")
        if not isinstance(name, str):
            return
        arguments = params.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        call = ToolCall(
            call_id_text(message["id"]), name, arguments, t_ms, by_proxy=sender == "proxy"
        )
        if call.id in self.pending:  # a reused id replaces the earlier pending call
            self._release(call.id)
        turn = self.turn
        if turn is None or not self._joins(turn, call, t_ms):
            self._end_turn()
            turn = _Turn(Assistant(None, [], t_ms))
            self.events.append(turn.event)
            self.turn = turn
        turn.event.calls.append(call)
        turn.open += 1
        self.sent_after[call.id] = turn.results
        self.pending[call.id] = (call, turn)
        passed: set[str] = set()
        scalar_values(arguments, passed)
        self.known |= passed

    def _joins(self, turn: _Turn, call: ToolCall, t_ms: int) -> bool:
        if turn.open > 0:
            return True  # parallel calls of one turn
        if call.by_proxy or turn.said_since or turn.last_result_ms is None:
            return False
        if t_ms - turn.last_result_ms > SAME_TURN_MS:
            return False
        passed: set[str] = set()
        scalar_values(call.arguments, passed)
        # A value the agent could only have read in this turn's results needs a new LLM turn.
        return not (passed & turn.new_values)

    def _release(self, call_id: str) -> tuple[ToolCall, _Turn] | None:
        entry = self.pending.pop(call_id, None)
        if entry is not None and not entry[0].cancelled:
            entry[1].open -= 1
        return entry

    def _cancel(self, call_id: str) -> None:
        entry = self.pending.get(call_id)
        if entry is not None and not entry[0].cancelled:
            entry[0].cancelled = True
            entry[1].open -= 1  # it no longer holds its turn open; a late answer still counts

    def _response(self, sender: str, message: dict, t_ms: int) -> None:
        key = call_id_text(message["id"])
        if key in self.tool_list_requests and "result" in message:
            self.tool_list_requests.discard(key)
            for info in tools_from_result(message["result"]):
                self.tools[info.name] = info  # a later listing wins
            return
        entry = self.pending.get(key)
        if entry is None:
            return  # first response wins; later copies (the proxy's extended answer) are ignored
        call, turn = entry
        self._release(key)
        if "error" in message:
            error = message["error"]
            failed = True
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                content = error["message"]
            else:
                content = compact(error)
        else:
            result = message["result"]
            failed = isinstance(result, dict) and result.get("isError") is True
            content = result_content(result)
        self.events.append(ToolResult(call.id, call.name, failed, content, t_ms, call.by_proxy))
        turn.results += 1
        turn.last_result_ms = t_ms
        fresh = text_values(content) - self.known
        fresh = {v for v in fresh if v not in self.said}
        turn.new_values |= fresh


def episode_from_log(log: SessionLog) -> Episode:
    return _EpisodeBuilder(log).build()


def read_episode(path: Path | str) -> Episode:
    return episode_from_log(read_session_log(path))


def read_episodes(directory: Path | str) -> list[Episode]:
    """Every session log in a directory as an episode, sorted by session id."""
    episodes = [read_episode(p) for p in list_session_logs(directory)]
    return sorted(episodes, key=lambda e: e.id)
