"""OpenTelemetry traces of an agent as session logs (docs/formats.md §1.6): `learn --otel`,
`ingest --otel`, `drift --otel`.

An OTLP export of GenAI spans — OTLP/JSON (`resourceSpans` → `scopeSpans` → `spans`, one
document or one per line, as the collector's file exporter writes) or OTLP protobuf (an
`ExportTraceServiceRequest`, or a run of them each after its 4-byte big-endian length) — is
turned into one session log per trace, written exactly as stretto-proxy records, so every
command reads it unchanged:

- a tool call is a span with `gen_ai.operation.name = execute_tool`, or an MCP client span
  with `mcp.method.name = tools/call` (one inside an `execute_tool` span is the same call):
  `gen_ai.tool.name` (else the span name's tool), `gen_ai.tool.call.id`,
  `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` (JSON text); it failed when the
  span's status is ERROR or it has `error.type`;
- `chat` spans (and `text_completion`, `generate_content`) are the LLM turns: the tool calls
  that start after one, before the next, are the calls it made; `gen_ai.input.messages` gives
  what the user said, `gen_ai.output.messages` the agent's text (a reply when the turn made no
  call).

A tool span without arguments or a result is left out and counted, never guessed (a failed one
with a status message keeps that message as its result): a flow that learned `{}` as a call's
arguments would make that call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stretto.home import private_dirs, write_private
from stretto.logs.episode import Episode, episode_from_log
from stretto.logs.otlp import Span, read_spans
from stretto.logs.sessionlog import parse_session_log
from stretto.vocabulary import LOG_VERSION, PROTOCOL_VERSION, SAME_TURN_MS

CONVENTIONS = "OpenTelemetry GenAI semantic conventions (execute_tool, chat) and MCP tools/call"
CONTENT_META = "otel/content"  # the agent's text in a turn that made calls (as tau2/content)
LLM_OPERATIONS = ("chat", "text_completion", "generate_content")
LEFT_OUT_EXAMPLES = 3


@dataclass
class Converted:
    session: str
    trace: str
    text: str  # the session log
    calls: int


@dataclass
class OtelImport:
    path: Path
    sessions: list[Converted] = field(default_factory=list)
    spans: int = 0
    tool_spans: int = 0
    llm_spans: int = 0
    merged: int = 0  # MCP client spans inside an execute_tool span (the same call)
    left_out: dict[str, list[str]] = field(default_factory=dict)  # reason -> span places

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.sessions)

    def leave_out(self, reason: str, span: Span) -> None:
        self.left_out.setdefault(reason, []).append(f"{span.where} ({span.name})")

    def summary(self) -> str:
        """One line for the command's output."""
        text = (
            f"{self.path}: {len(self.sessions)} traces as sessions, {self.calls} tool calls "
            f"from {self.tool_spans} tool spans ({self.merged} MCP spans inside execute_tool "
            f"spans), {self.llm_spans} LLM turns"
        )
        for reason, places in sorted(self.left_out.items()):
            examples = ", ".join(places[:LEFT_OUT_EXAMPLES])
            text += f"; {len(places)} tool spans {reason}, left out (e.g. {examples})"
        return text


# --- one trace as a session log ---------------------------------------------------------------


def _json_attr(value: Any) -> tuple[bool, Any]:
    """(present, value) of an attribute holding JSON text (or already structured)."""
    if value is None:
        return False, None
    if isinstance(value, str):
        try:
            return True, json.loads(value)
        except ValueError:
            return True, value
    return True, value


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _tool_name(span: Span) -> str | None:
    name = span.attrs.get("gen_ai.tool.name")
    if isinstance(name, str) and name:
        return name
    match = re.fullmatch(r"(?:execute_tool|tools/call) (\S+)", span.name)
    return match.group(1) if match else None


def _is_tool(span: Span) -> bool:
    return (
        span.attrs.get("gen_ai.operation.name") == "execute_tool"
        or span.attrs.get("mcp.method.name") == "tools/call"
    )


def _messages(value: Any) -> list[tuple[str, str, bool]]:
    """(role, text, made calls) of each message of a GenAI messages attribute."""
    present, messages = _json_attr(value)
    if not present or not isinstance(messages, list):
        return []
    out = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = str(message["role"]) if isinstance(message.get("role"), str) else ""
        parts = message.get("parts")
        if isinstance(parts, list):
            texts = [
                p["content"]
                for p in parts
                if isinstance(p, dict)
                and p.get("type") == "text"
                and isinstance(p.get("content"), str)
            ]
            calls = any(isinstance(p, dict) and p.get("type") == "tool_call" for p in parts)
        else:
            content = message.get("content")
            texts = [content] if isinstance(content, str) else []
            calls = bool(message.get("tool_calls"))
        out.append((role, "\n".join(texts), calls))
    return out


def _result(span: Span, value: Any, failed: bool) -> dict:
    """The server's `tools/call` result for a span's recorded result."""
    if (
        isinstance(value, dict)
        and isinstance(value.get("content"), list)
        and all(
            isinstance(item, dict) and isinstance(item.get("type"), str)
            for item in value["content"]
        )
    ):
        result = dict(value)  # an MCP CallToolResult, recorded whole
        result["isError"] = bool(value.get("isError")) or failed
        return result
    raw = span.attrs.get("gen_ai.tool.call.result")
    text = raw if isinstance(raw, str) else _dumps(value)
    return {"content": [{"type": "text", "text": text}], "isError": failed}


class _Log:
    """The lines of one session log, with `t_ms` that never decreases."""

    def __init__(self, origin_ns: int) -> None:
        self.origin_ns = origin_ns
        self.lines: list[str] = []
        self.clock = 0
        self.after_result = False

    def at(self, ns: int, gap: int = 0) -> int:
        self.clock = max(self.clock + gap, (ns - self.origin_ns) // 1_000_000)
        return self.clock

    def write(self, sender: str, message: dict) -> None:
        self.lines.append(f'{{"t_ms":{self.clock},"from":"{sender}","message":{_dumps(message)}}}')


@dataclass
class _Call:
    span: Span
    tool: str
    id: str
    arguments: dict
    result: dict


def _calls(spans: list[Span], out: OtelImport) -> list[_Call]:
    """The trace's tool calls, in start order (each MCP span inside an execute_tool span
    merged into it)."""
    by_id = {s.id: s for s in spans}
    tools = [s for s in spans if _is_tool(s)]
    inner: dict[str, list[Span]] = {}
    for span in tools:
        if span.attrs.get("gen_ai.operation.name") == "execute_tool":
            continue
        parent = by_id.get(span.parent)
        while parent is not None and not (
            parent.attrs.get("gen_ai.operation.name") == "execute_tool"
        ):
            parent = by_id.get(parent.parent)
        if parent is not None:
            inner.setdefault(parent.id, []).append(span)
    merged = {s.id for spans_ in inner.values() for s in spans_}
    out.tool_spans += len(tools)
    out.merged += len(merged)
    calls, used_ids = [], set()
    for span in sorted(tools, key=lambda s: (s.start_ns, s.end_ns)):
        if span.id in merged:
            continue
        attrs = dict(span.attrs)
        for child in inner.get(span.id, []):
            for key, value in child.attrs.items():
                attrs.setdefault(key, value)
        merged_span = Span(**{**span.__dict__, "attrs": attrs})
        tool = _tool_name(merged_span)
        if tool is None:
            out.leave_out("without a tool name", span)
            continue
        has_args, arguments = _json_attr(attrs.get("gen_ai.tool.call.arguments"))
        if not has_args:
            out.leave_out("without arguments", span)
            continue
        if not isinstance(arguments, dict):
            out.leave_out("whose arguments are not a JSON object", span)
            continue
        failed = span.failed or any(c.failed for c in inner.get(span.id, []))
        has_result, value = _json_attr(attrs.get("gen_ai.tool.call.result"))
        if has_result:
            result = _result(merged_span, value, failed)
        elif failed and (span.status_message or attrs.get("error.type")):
            text = span.status_message or str(attrs["error.type"])
            result = {"content": [{"type": "text", "text": text}], "isError": True}
        else:
            out.leave_out("without a result", span)
            continue
        call_id = attrs.get("gen_ai.tool.call.id") or attrs.get("jsonrpc.request.id")
        call_id = str(call_id) if call_id not in (None, "") else f"span-{span.id}"
        base, n = call_id, 2
        while call_id in used_ids:  # ours must be unique in the session
            call_id, n = f"{base}#{n}", n + 1
        used_ids.add(call_id)
        calls.append(_Call(merged_span, tool, call_id, arguments, result))
    return calls


def _turns(calls: list[_Call], llm: list[Span]) -> list[tuple[int, list[_Call]]]:
    """(the index of the LLM span that made them, or -1) and the calls of each turn: the calls
    that start after an LLM span and before the next; without one, calls that overlap."""
    turns: list[tuple[int, list[_Call]]] = []
    starts = [s.start_ns for s in llm]
    for call in calls:
        owner = max((i for i, t in enumerate(starts) if t <= call.span.start_ns), default=-1)
        last = turns[-1] if turns else None
        if last is not None and last[0] == owner and owner >= 0:
            last[1].append(call)
        elif (
            last is not None
            and last[0] == owner
            and call.span.start_ns < max(c.span.end_ns for c in last[1])
        ):
            last[1].append(call)  # no LLM span: calls running together are one turn
        else:
            turns.append((owner, [call]))
    return turns


def _convert(path: Path, trace: str, spans: list[Span], domain: str, manifest, out: OtelImport):
    spans = sorted(spans, key=lambda s: (s.start_ns, s.end_ns))
    calls = _calls(spans, out)
    llm = [s for s in spans if s.attrs.get("gen_ai.operation.name") in LLM_OPERATIONS]
    out.llm_spans += len(llm)
    model = next(
        (
            s.attrs.get(key)
            for s in llm
            for key in ("gen_ai.response.model", "gen_ai.request.model")
            if isinstance(s.attrs.get(key), str)
        ),
        None,
    )
    origin = spans[0].start_ns
    session = f"otel-{trace}"
    header: dict[str, Any] = {
        "stretto_mcp_log": LOG_VERSION,
        "session": session,
        "started_unix_ms": origin // 1_000_000,
        "server_command": [],
        "domain": domain,
        "agent_model": model,
        "otel_trace": trace,
        "otel_file": path.name,
    }
    log = _Log(origin)
    client = next((s.service for s in spans if s.service), None) or "otel"
    initialize = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}}
    log.write(
        "client",
        {
            "jsonrpc": "2.0",
            "id": "otel-initialize",
            "method": "initialize",
            "params": {**initialize, "clientInfo": {"name": client, "version": "otel"}},
        },
    )
    log.write(
        "server",
        {
            "jsonrpc": "2.0",
            "id": "otel-initialize",
            "result": {
                **initialize,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "otel", "version": "otel"},
            },
        },
    )
    log.write("client", {"jsonrpc": "2.0", "method": "notifications/initialized"})
    if manifest:
        log.write("client", {"jsonrpc": "2.0", "id": "otel-tools", "method": "tools/list"})
        log.write("server", {"jsonrpc": "2.0", "id": "otel-tools", "result": _tool_list(manifest)})
    # blocks of lines at their real time: what the user said (before the LLM span that read
    # it), each turn's calls and results, and replies
    blocks: list[tuple[int, int, str, Any]] = []
    said = 0
    for span in llm:
        users = [m for m in _messages(span.attrs.get("gen_ai.input.messages")) if m[0] == "user"]
        for _, text, _ in users[said:]:
            blocks.append((span.start_ns, len(blocks), "say", ("user", text)))
        said = max(said, len(users))
    turns = _turns(calls, llm)
    with_calls = {owner for owner, _ in turns}
    for owner, turn in turns:
        text = ""
        if owner >= 0:
            output = _messages(llm[owner].attrs.get("gen_ai.output.messages"))
            text = "\n".join(t for role, t, _ in output if role == "assistant" and t)
        blocks.append((turn[0].span.start_ns, len(blocks), "turn", (turn, text)))
    for i, span in enumerate(llm):
        if i in with_calls:
            continue
        output = _messages(span.attrs.get("gen_ai.output.messages"))
        text = "\n".join(t for role, t, _ in output if role == "assistant" and t)
        if text.strip():
            blocks.append((span.end_ns, len(blocks), "say", ("assistant", text)))
    for when, _, kind, item in sorted(blocks, key=lambda b: (b[0], b[1])):
        if kind == "say":
            log.at(when, 1 if log.lines else 0)
            log.write("context", {"role": item[0], "content": item[1]})
            log.after_result = False
            continue
        turn, text = item
        log.at(when, SAME_TURN_MS + 1 if log.after_result else 1)
        for k, call in enumerate(turn):
            params: dict[str, Any] = {"name": call.tool, "arguments": call.arguments}
            if k == 0 and text.strip():
                params["_meta"] = {CONTENT_META: text}
            log.write(
                "client",
                {"jsonrpc": "2.0", "id": call.id, "method": "tools/call", "params": params},
            )
        for call in sorted(turn, key=lambda c: c.span.end_ns):
            log.at(call.span.end_ns)
            log.write("server", {"jsonrpc": "2.0", "id": call.id, "result": call.result})
        log.after_result = True
    text = "\n".join([_dumps(header), *log.lines]) + "\n"
    return Converted(session, trace, text, len(calls))


def _tool_list(manifest: dict) -> dict:
    """A `tools/list` answer telling each tool's kind (and summary) from a manifest; no input
    schema, so no contract is pinned (the export does not tell the server's)."""
    hints = {"read": True, "write": False}
    tools = []
    for name, kind in sorted(manifest["tools"].items()):
        tool: dict[str, Any] = {"name": name}
        summary = (manifest.get("docs") or {}).get(name, {}).get("summary")
        if summary:
            tool["description"] = summary
        if kind in hints:
            tool["annotations"] = {"readOnlyHint": hints[kind]}
        tools.append(tool)
    return {"tools": tools}


def read_otel(
    path: str | Path, manifest: dict | None = None, domain: str | None = None
) -> OtelImport:
    """Every trace of an OTLP export as a session log, in the order the traces started.
    `manifest` (stretto.model.flow.load_manifest) gives the tools' kinds; `domain` the logs'
    domain (else the manifest's, else `otel`)."""
    spans, path = read_spans(path)
    domain = domain or (manifest or {}).get("domain") or "otel"
    out = OtelImport(path, spans=len(spans))
    traces: dict[str, list[Span]] = {}
    for span in spans:
        traces.setdefault(span.trace, []).append(span)
    ordered = sorted(traces.items(), key=lambda kv: (min(s.start_ns for s in kv[1]), kv[0]))
    for trace, members in ordered:
        out.sessions.append(_convert(path, trace, members, domain, manifest, out))
    return out


def write_logs(result: OtelImport, out: str | Path) -> list[Path]:
    """Write each trace's log to `out/<session>.jsonl` (a file already holding the same log
    is left as it is, so importing again changes nothing); the paths."""
    out = private_dirs(Path(out), own=False)
    written = []
    for converted in result.sessions:
        target = out / f"{converted.session}.jsonl"
        data = converted.text.encode("utf-8")
        if not (target.is_file() and target.read_bytes() == data):
            write_private(target, data)
        written.append(target)
    return written


def episodes_from_otel(
    path: str | Path, manifest: dict | None = None, domain: str | None = None
) -> list[Episode]:
    """The traces of an export as episodes, read by the session-log and episode readers."""
    result = read_otel(path, manifest, domain)
    return [
        episode_from_log(parse_session_log(s.text.encode("utf-8"), f"{result.path}#{s.trace}"))
        for s in result.sessions
    ]
