"""Session logs as episodes: the conversation, the tool calls grouped into LLM turns, their
results, and the server's tool list (docs/formats.md, "From a log to an episode")."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stretto.logs.pairing import (  # noqa: F401 - call_id_text re-exported
    Pairing,
    call_id_text,
    is_answer,
    messages,
    request_method,
    tool_call,
)
from stretto.logs.rewards import successful
from stretto.logs.sessionlog import SessionLog, read_session_log
from stretto.logs.toollist import ToolInfo, tools_from_result
from stretto.logs.turns import FirstSources, TurnTracker


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    sent_ms: int
    by_proxy: bool = False  # a lookup the flow made, not the agent's own call
    cancelled: bool = False
    key: tuple[int, int] = (0, 0)  # (log line, index in a batch): unique, unlike a reused id


@dataclass
class User:
    text: str
    t_ms: int = 0
    seq: int = 0  # its log line


@dataclass
class Assistant:
    """One LLM turn: a reply (no calls) or the tool calls it made together."""

    text: str | None
    calls: list[ToolCall]
    t_ms: int = 0
    seq: int = 0  # its log line (a turn's: its first call's)


@dataclass
class ToolResult:
    call_id: str
    name: str
    error: bool
    content: str
    t_ms: int = 0
    by_proxy: bool = False
    call_key: tuple[int, int] = (0, 0)  # the key of the call it answers
    seq: int = 0  # the log line of the call it answers (its place among the events)
    answer_line: int = 0  # the log line of the answer itself
    refused: bool = False  # the answer was a JSON-RPC error, not a result


Event = User | Assistant | ToolResult


def is_llm_turn(event: Assistant) -> bool:
    """Whether an Assistant event is the agent's LLM turn: a reply, or calls of its own."""
    return not event.calls or any(not c.by_proxy for c in event.calls)


@dataclass
class Episode:
    id: str
    domain: str
    agent_model: str
    events: list[Event]
    task_id: str = ""
    trial: int = 0
    reward: float | None = None  # None: a recorded session, which counts as successful
    started_ms: int = 0  # the header's started_unix_ms
    tools: dict[str, ToolInfo] = field(default_factory=dict)
    # per call id: how many results of its turn had come back when it was sent
    sent_after_results: dict[str, int] = field(default_factory=dict)
    source: str = ""

    @property
    def succeeded(self) -> bool:
        """No reward (a recorded session) or a reward of at least 1 (the warehouse's rule)."""
        return successful(self.reward)

    def calls(self) -> list[ToolCall]:
        return [c for e in self.events if isinstance(e, Assistant) for c in e.calls]

    def llm_turns(self) -> int:
        """The agent's LLM turns: its replies and its turns with a call of its own (a turn of
        the flow's lookups alone is the proxy's, not an LLM's). `stretto sessions`, the
        console and replay's `turns` count them so."""
        return sum(is_llm_turn(e) for e in self.events if isinstance(e, Assistant))

    def results(self) -> dict[str, ToolResult]:
        """Results by call id (a reused id keeps its last result; see `results_by_key`)."""
        return {e.call_id: e for e in self.events if isinstance(e, ToolResult)}

    def results_by_key(self) -> dict[tuple[int, int], ToolResult]:
        """Results by the key of the call they answer: exact even when ids are reused."""
        return {e.call_key: e for e in self.events if isinstance(e, ToolResult)}


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


class _EpisodeBuilder:
    def __init__(self, log: SessionLog) -> None:
        self.log = log
        self.events: list[Event] = []
        self.calls: Pairing[ToolCall] = Pairing()
        self.turns = TurnTracker()
        self.sources = FirstSources()
        self.turn_events: dict[int, Assistant] = {}
        self.tool_list_requests: set[str] = set()
        self.tools: dict[str, ToolInfo] = {}
        self.client_name: str | None = None

    def build(self) -> Episode:
        for line in self.log.lines:
            if not line.is_json:
                continue
            if line.sender == "context":
                self._context(line.message, line.t_ms, line.number)
                continue
            for index, message in enumerate(messages(line.message)):
                if isinstance(message, dict):
                    self._message(line.sender, message, line.t_ms, (line.number, index))
        header = self.log.header
        episode = Episode(
            id=header.session,
            domain=header.domain or "mcp",
            agent_model=header.agent_model or self.client_name or "unknown",
            events=self.events,
            tools=self.tools,
            sent_after_results=self.turns.sent_after,
            source=str(self.log.path),
            started_ms=header.started_unix_ms,
        )
        # Optional header extras (written by `stretto import-tau2`); absent in proxy logs.
        extra = header.extra
        if isinstance(extra.get("task_id"), str | int) and not isinstance(extra["task_id"], bool):
            episode.task_id = str(extra["task_id"])
        if isinstance(extra.get("trial"), int) and not isinstance(extra["trial"], bool):
            episode.trial = extra["trial"]
        if isinstance(extra.get("reward"), int | float) and not isinstance(extra["reward"], bool):
            episode.reward = float(extra["reward"])
        return episode

    # conversation --------------------------------------------------------------------------

    def _context(self, message: Any, t_ms: int, seq: int) -> None:
        role, text = context_message(message)
        if role == "user":
            self.events.append(User(text, t_ms, seq))
        elif role == "assistant" and text.strip():
            self.events.append(Assistant(text, [], t_ms, seq))
        else:
            return
        self.sources.add_said(text)
        self.turns.said(role)

    # wire messages -------------------------------------------------------------------------

    def _message(self, sender: str, message: dict, t_ms: int, key: tuple[int, int]) -> None:
        method = request_method(sender, message)
        if method is not None:
            if method == "tools/call":
                self._call(sender, message, t_ms, key)
            elif method == "tools/list" and message.get("id") is not None:
                self.tool_list_requests.add(call_id_text(message["id"]))
            elif method == "initialize" and sender == "client":
                params = message.get("params")
                info = params.get("clientInfo") if isinstance(params, dict) else None
                if isinstance(info, dict) and isinstance(info.get("name"), str):
                    self.client_name = info["name"]
            elif method == "notifications/cancelled" and sender == "client":
                params = message.get("params")
                if isinstance(params, dict) and "requestId" in params:
                    self._cancel(call_id_text(params["requestId"]))
        elif is_answer(sender, message):
            self._response(message, t_ms, key[0])

    def _call(self, sender: str, message: dict, t_ms: int, key: tuple[int, int]) -> None:
        sent = tool_call(sender, message)
        if sent is None:
            return
        call_id, name, arguments = sent
        by_proxy = sender == "proxy"
        call = ToolCall(call_id, name, arguments, t_ms, by_proxy=by_proxy, key=key)
        source = self.sources.source_of_call(arguments)
        number = self.turns.call(key[0], t_ms, call.id, by_proxy, source)
        event = self.turn_events.get(number)
        if event is None:
            event = self.turn_events[number] = Assistant(None, [], t_ms, key[0])
            self.events.append(event)
        event.calls.append(call)
        self.calls.sent(call.id, call)

    def _cancel(self, call_id: str) -> None:
        call = self.calls.waiting(call_id)
        if call is not None:
            call.cancelled = True
            self.turns.cancel(call_id)

    def _response(self, message: dict, t_ms: int, line: int) -> None:
        key = call_id_text(message["id"])
        if key in self.tool_list_requests and "result" in message:
            self.tool_list_requests.discard(key)
            for info in tools_from_result(message["result"]):
                self.tools[info.name] = info  # a later listing wins
            return
        call = self.calls.answered(key)
        if call is None:
            return  # first response wins; later copies (the proxy's extended answer) are ignored
        failed, content = response_outcome(message)
        seq = call.key[0]
        self.events.append(
            ToolResult(
                call.id,
                call.name,
                failed,
                content,
                t_ms,
                call.by_proxy,
                call.key,
                seq,
                answer_line=line,
                refused="result" not in message,
            )
        )
        self.turns.result(t_ms, call.id)
        self.sources.add_result(seq, content)


def context_message(message: Any) -> tuple[str | None, str]:
    """The role and text of a context line."""
    if not isinstance(message, dict):
        return None, ""
    content = message.get("content")
    text = content if isinstance(content, str) else ("" if content is None else compact(content))
    role = message.get("role")
    return (role if isinstance(role, str) else None), text


def response_outcome(message: dict) -> tuple[bool, str]:
    """(failed, content) of a response to a tools/call."""
    if "error" in message:
        error = message["error"]
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return True, error["message"]
        return True, compact(error)
    result = message["result"]
    failed = isinstance(result, dict) and result.get("isError") is True
    return failed, result_content(result)


def episode_from_log(log: SessionLog) -> Episode:
    return _EpisodeBuilder(log).build()


def read_episode(path: Path | str) -> Episode:
    return episode_from_log(read_session_log(path))


def in_start_order(episodes: Iterable[Episode]) -> list[Episode]:
    """Episodes in the order their sessions started (header `started_unix_ms`, then id), as
    drift and staging read them: the learner's order too (the warehouse's `session_order`)."""
    return sorted(episodes, key=lambda e: (e.started_ms, e.id))
