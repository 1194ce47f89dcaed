"""One pass over a session log (and its flow log) into what the console shows: the session's
summary and its timeline, with every text cut to a preview and each item pointing at its log
line, so a page of a large session is served from the index and the full line is read from
the file only when asked for.

The episode (LLM turns, results) comes from the episode reader; this module only lays it out
in log order and joins the flow log's decisions to the calls they followed.
"""

from __future__ import annotations

import json
import warnings
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stretto.console import adapter

PREVIEW = 2000  # characters of a text kept in the index
APPENDIX = "--- Also looked up automatically"  # how the proxy's appended block begins
SOURCE_LOOKBACK = 200  # earlier results searched for a lookup argument's source


def preview(text: str) -> dict:
    return {"text": text[:PREVIEW], "chars": len(text), "cut": len(text) > PREVIEW}


@dataclass
class Index:
    """A session log, indexed."""

    path: Path
    summary: dict
    items: list[dict] = field(default_factory=list)
    offsets: array = field(default_factory=lambda: array("q"))  # byte offset of each line
    problems: list[str] = field(default_factory=list)

    def line_bytes(self, number: int) -> bytes:
        """The bytes of line `number` (1-based), read from the file."""
        start = self.offsets[number - 1]
        end = self.offsets[number] if number < len(self.offsets) else None
        with self.path.open("rb") as f:
            f.seek(start)
            return f.read() if end is None else f.read(end - start)


class _Reader:
    """Reads a log line by line (stretto.logs.logreader: a line that cannot be read is skipped
    and named, a torn last line dropped), noting each context line and each block the proxy
    appended to an answer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: Any = None
        self.appended: dict[str, list[tuple[int, str]]] = {}  # agent call id -> (line, text)
        self.context: list[tuple[int, int, str | None, str]] = []  # line, t_ms, role, text
        self.last_t_ms = 0

    def open(self):
        self.file = self.path.open("rb")
        self.log = adapter.LineReader(self.file, self.path, "skip")
        try:
            first = self.log.header()
            if first is None and self.log.torn is not None:
                raise self.log.torn.error  # a log whose one line is cut off
            if first is None:
                raise adapter.LogError(self.path, None, "empty: no header line")
            self.header = adapter.parse_header(self.path, first[1], first[0])
        except BaseException:
            self.file.close()
            raise
        return self

    @property
    def offsets(self) -> array:
        return self.log.offsets  # each line's byte offset

    def lines(self):
        """The wire lines that can be read."""
        try:
            for number, value in self.log.values():
                try:
                    line = adapter.parse_wire_line(self.path, number, value)
                except adapter.LogError as exc:
                    self.log.reject(exc)
                    continue
                self.last_t_ms = line.t_ms
                if line.is_json and line.sender == "context":
                    role, text = adapter.context_message(line.message)
                    self.context.append((line.number, line.t_ms, role, text))
                elif line.is_json and line.sender == "proxy":
                    self._note_appended(line)
                yield line
        finally:
            self.file.close()

    def _note_appended(self, line) -> None:
        """The block of lookups the proxy appended to its answer to the agent, if any."""
        for message in adapter.messages(line.message):
            if not isinstance(message, dict) or not adapter.is_answer(line.sender, message):
                continue
            result = message.get("result")
            content = result.get("content") if isinstance(result, dict) else None
            last = content[-1] if isinstance(content, list) and content else None
            if isinstance(last, dict) and str(last.get("text", "")).startswith(APPENDIX):
                key = adapter.call_id_text(message["id"])
                self.appended.setdefault(key, []).append((line.number, last["text"]))


def _problems(log: adapter.LineReader) -> list[str]:
    """What a reader skipped: the first lines named, the rest counted, a torn last line."""
    named = [f"{bad.problem}; skipped the line" for bad in log.bad]
    if (notice := log.torn_notice()) is not None:
        named.append(notice)
    skipped = log.skipped + (log.torn is not None)
    if skipped > len(named):
        named.append(f"{skipped - len(named)} more lines skipped")
    return named


def read_flow_runs(path: Path) -> tuple[dict[str, list[dict]], list[str]]:
    """The flow log's decisions and runs, grouped by the agent call they followed (in order),
    and the problems met (a line that cannot be read, or names no call, is skipped and named)."""
    runs: dict[str, list[dict]] = {}
    if not path.exists():
        return runs, []
    flow = adapter.read_flow_log(path, "skip", required=("after",))
    for number, entry in flow.entries:
        key = adapter.call_id_text(entry["after"])
        group = runs.setdefault(key, [])
        if not group or "run" in group[-1]["entries"][-1]:
            group.append({"entries": []})
        entry["line"] = number
        group[-1]["entries"].append(entry)
    return runs, _problems(flow.reader)


def server_label(command: list[str]) -> str:
    """A short name for the server a session ran: the first argument that is not an
    interpreter or an option (its file name), or the URL's host."""
    interpreters = {"node", "npx", "python", "python3", "uv", "uvx", "deno", "bun", "docker"}
    for arg in command:
        if "://" in arg:
            return arg.split("://", 1)[1].split("/", 1)[0]
        name = arg.rstrip("/").rsplit("/", 1)[-1]
        if arg.startswith("-") or name in interpreters or name.startswith("python3."):
            continue
        return name.removesuffix(".py").removesuffix(".js") or arg
    return "(none)"


def index_session(path: Path) -> Index:
    """Read and index one session log; a log that cannot be read at all raises LogError."""
    reader = _Reader(path).open()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        episode = adapter.episode_from_lines(path, reader.header, reader.lines())
    flow_log = adapter.flow_log_of(path)
    flow_runs, flow_problems = read_flow_runs(flow_log)
    builder = _Timeline(episode, reader, flow_runs)
    items = builder.build()
    problems = _problems(reader.log) + flow_problems
    header = reader.header
    summary = {
        "id": header.session,
        "domain": episode.domain,
        "agent_model": episode.agent_model,
        "server": server_label(header.server_command),
        "server_command": header.server_command,
        "started_unix_ms": header.started_unix_ms,
        "duration_ms": reader.last_t_ms,
        "calls": builder.counts["calls"],
        "errors": builder.counts["errors"],
        "writes": builder.counts["writes"],
        "lookups": builder.counts["lookups"],
        "lookups_used": builder.counts["used"],
        "lookups_answered": builder.counts["answered"],
        "decisions": builder.counts["decisions"],
        "shadow_decisions": builder.counts["shadow"],
        "hand_backs": builder.counts["hand_backs"],
        "turns": builder.turn_count,
        "user_messages": builder.counts["user"],
        "mode": builder.mode(),
        "has_flow_log": flow_log.exists(),
        "lines": len(reader.offsets),
        "items": len(items),
        "task_id": episode.task_id or None,
        "reward": header.extra.get("reward"),
        "problem": "; ".join(problems) or None,
    }
    return Index(path, summary, items, reader.offsets, problems)


class _Sent:
    """The calls sent (the agent's and the flow's), indexed for "used later".

    adapter.used_later (the one rule, bound arguments) matches only calls of the same tool
    whose arguments hold the decision's values, and stops at the agent's next write; so it is
    asked about those calls alone, and its answer is the same as over every call — without a
    pass over the whole session for each decision."""

    def __init__(self, items: list[dict], writes: frozenset[str]) -> None:
        self.by_value: dict[tuple, list[dict]] = {}  # (tool, arg, value text) -> calls
        self.by_tool: dict[str, list[dict]] = {}
        for item in items:
            self.by_tool.setdefault(item["tool"], []).append(item)
            for arg, value in (item["arguments"] or {}).items():
                key = (item["tool"], arg, adapter.value_text(value))
                self.by_value.setdefault(key, []).append(item)
        self.write_lines = [i["line"] for i in items if i["kind"] == "call" and i["tool"] in writes]
        self.write_calls = [
            i["_call"] for i in items if i["kind"] == "call" and i["tool"] in writes
        ]
        self.write_tools = writes

    def used_later(self, tool: str, arguments: dict, after: int, made: list) -> bool:
        """Whether the agent made tool(arguments) itself after line `after` (the answer the
        run follows); `made`: this run's lookups before it."""
        if arguments:
            arg, value = next(iter(arguments.items()))
            same = self.by_value.get((tool, arg, adapter.value_text(value)), [])
        else:
            same = self.by_tool.get(tool, [])
        cut = bisect_right(self.write_lines, after)
        next_write = self.write_lines[cut] if cut < len(self.write_lines) else None
        later = [
            i["_call"]
            for i in same
            if i["kind"] == "call"
            and after < i["line"]
            and (next_write is None or i["line"] < next_write)
        ]
        if next_write is not None:
            later.append(self.write_calls[cut])
        before = [(i["tool"], i["arguments"] or {}) for i in same if i["line"] < after]
        return adapter.used_later(tool, arguments, later, self.write_tools, before + made)


class _Timeline:
    def __init__(self, episode, reader: _Reader, flow_runs: dict[str, list[dict]]) -> None:
        self.episode, self.reader, self.flow_runs = episode, reader, flow_runs
        self.kinds = {name: info.kind for name, info in episode.tools.items()}
        self.writes = adapter.write_tools(self.kinds)
        self.counts = dict.fromkeys(
            ("calls", "errors", "writes", "lookups", "used", "answered", "decisions", "shadow"), 0
        )
        self.counts.update(hand_backs=0, user=0)
        self.turn_count = 0
        self.used_runs: dict[str, int] = {}

    def mode(self) -> str:
        if self.counts["lookups"]:
            return "served"
        if self.counts["shadow"]:
            return "shadow"
        return "served" if self.counts["decisions"] else "recorded"

    def build(self) -> list[dict]:
        results = self.episode.results_by_key()
        items: list[dict] = []
        replies: dict[int, int] = {}  # the n-th reply of the conversation -> its LLM turn
        turn = -1
        for event in self.episode.events:
            if isinstance(event, adapter.User | adapter.ToolResult):
                continue
            # an LLM turn is the agent's: a reply, or calls of its own (lookups alone are not)
            agent_turn = adapter.is_llm_turn(event)  # Episode.llm_turns(): one rule
            turn += agent_turn
            if not event.calls:
                replies[len(replies)] = turn
                continue
            for call in event.calls:
                result = results.get(call.key)
                item = self._call_item(call, result, turn)
                if not call.by_proxy:
                    self.counts["calls"] += 1
                    self.counts["errors"] += bool(result is not None and result.error)
                    self.counts["writes"] += self.kinds.get(call.name) == "write"
                items.append(item)
        self.turn_count = turn + 1
        items.extend(self._context_items(replies))
        self._join_flow(items)
        self._sources(items)
        items.sort(key=lambda i: (i.get("line", 0), i.get("sub", 0)))
        return items

    def _context_items(self, replies: dict[int, int]) -> list[dict]:
        """The conversation, in log order; the assistant's replies with their LLM turn (the
        episode reader makes a reply of each assistant line with text)."""
        out, said = [], 0
        for line, t_ms, role, text in self.reader.context:
            item = {"kind": "context", "role": role, "line": line, "t_ms": t_ms} | preview(text)
            if role == "user":
                item["kind"] = "user"
                self.counts["user"] += 1
            elif role == "assistant" and text.strip():
                item["kind"], item["turn"] = "reply", replies.get(said)
                said += 1
            out.append(item)
        return out

    def _call_item(self, call, result, turn: int) -> dict:
        item = {
            "kind": "lookup" if call.by_proxy else "call",
            "id": call.id,
            "tool": call.name,
            "tool_kind": self.kinds.get(call.name, "unknown"),
            "arguments": call.arguments,
            "t_ms": call.sent_ms,
            "line": call.key[0],
            "sub": call.key[1],
            "turn": None if call.by_proxy else turn,
            "cancelled": call.cancelled,
            "status": "unanswered" if result is None else ("failed" if result.error else "ok"),
            "result": None if result is None else preview(result.content),
            "result_line": None if result is None else result.answer_line,
            "latency_ms": _latency_ms(call, result),
        }
        item["_call"] = call  # for "used later"; dropped after
        if result is not None:
            item["_content"] = result.content  # for the lookups' sources; dropped after
        return item

    def _join_flow(self, items: list[dict]) -> None:
        """Each flow run goes after the agent call it followed: its decisions, the lookups it
        made (paired in order with the decisions that made them), and the block appended to
        the agent's result."""
        calls_by_id: dict[str, list[dict]] = {}
        for item in items:
            if item["kind"] == "call":
                calls_by_id.setdefault(item["id"], []).append(item)
        lookups = [i for i in items if i["kind"] == "lookup"]
        calls = sorted((i for i in items if "_call" in i), key=lambda i: i["line"])
        sent = _Sent(calls, self.writes)
        for call_id, runs in self.flow_runs.items():
            targets = calls_by_id.get(call_id, [])
            for n, run in enumerate(runs):
                target = targets[n] if n < len(targets) else (targets[-1] if targets else None)
                self._place_run(items, run, target, lookups, sent)
        for call_id, blocks in self.reader.appended.items():
            for line, text in blocks:
                # the whole block (the proxy caps it), exactly as the agent got it
                items.append(
                    {"kind": "appended", "call_id": call_id, "line": line, "sub": 1}
                    | {"text": text, "chars": len(text), "cut": False}
                )
        for lookup in lookups:
            if not lookup.get("decision"):  # no flow log names it: asked of the lookup itself
                arguments = lookup["arguments"] or {}
                asked = sent.used_later(lookup["tool"], arguments, lookup["line"], [])
                self.counts["used"] += asked
                self.counts["answered"] += not asked
        self.counts["lookups"] = len(lookups)

    def _place_run(self, items, run, target, lookups, sent: _Sent) -> None:
        base = (target.get("result_line") or target["line"]) if target else 0
        made = [lk for lk in lookups if lk["line"] > base and not lk.get("decision")]
        last_line = base  # a decision that made no lookup shows after the run's last lookup
        made_in_run: list[tuple[str, dict]] = []  # this run's lookups so far
        for step, entry in enumerate(run["entries"]):
            if "run" in entry:
                if target is not None:
                    target["run"] = {k: entry.get(k) for k in ("ms",)} | {
                        "surprise": entry["run"].get("surprise"),
                        "call": entry["run"].get("call"),
                    }
                continue
            self.counts["decisions"] += 1
            shadow = bool(entry.get("shadow"))
            self.counts["shadow"] += shadow
            decision = {
                "address": entry.get("address"),
                "site": entry.get("site"),
                "action": entry.get("action"),
                "tool": entry.get("tool"),
                "arguments": entry.get("arguments"),
                "reason": entry.get("reason"),
                "prob": entry.get("prob"),
                "binding": entry.get("binding"),
                "score": _score(entry),
                "probs": entry.get("probs"),
                "shadow": shadow,
                "withheld": entry.get("withheld"),
                "flow_log_line": entry["line"],
            }
            if entry.get("action") == "hand_back" and not shadow:
                self.counts["hand_backs"] += 1
            executed = entry.get("action") == "lookup" and not shadow and not entry.get("withheld")
            if entry.get("action") == "lookup":
                # the agent's calls after the answer the run follows; those sent before it,
                # and this run's lookups, were made already
                used = isinstance(entry.get("tool"), str) and sent.used_later(
                    entry["tool"], entry.get("arguments") or {}, base, made_in_run
                )
                decision["used"] = used
                decision["label"] = "used later" if used else "detour"
                if executed and not used:
                    # the agent got it in the appended block: whether it read it, or would
                    # have made the call, the record cannot tell
                    decision["label"] = "not asked again (in the appended block)"
            if executed:
                made_in_run.append((entry.get("tool"), entry.get("arguments") or {}))
            if executed and made:
                lookup = made.pop(0)
                lookup["decision"] = decision
                self.counts["used"] += bool(decision.get("used"))
                # made, and the agent did not ask for it again: its result answered
                self.counts["answered"] += not decision.get("used")
                last_line = lookup["line"]
                continue
            after = target["id"] if target else None
            items.append(
                {"kind": "decision", "after": after, "line": last_line, "sub": 2 + step} | decision
            )

    def _sources(self, items: list[dict]) -> None:
        """Where each lookup's argument values came from: the newest earlier result holding
        the value (the binding reads earlier results)."""
        done: list[dict] = []
        calls = sorted(
            (i for i in items if i["kind"] in ("call", "lookup")), key=lambda i: i["line"]
        )
        for item in calls:
            if item["kind"] == "lookup":
                sources: dict[str, dict | None] = {}
                for arg, value in (item["arguments"] or {}).items():
                    text = value if isinstance(value, str) else json.dumps(value)
                    for earlier in reversed(done[-SOURCE_LOOKBACK:]):
                        if text and text in earlier.get("_content", ""):
                            sources[arg] = {
                                "tool": earlier["tool"],
                                "call": earlier["id"],
                                "line": earlier.get("result_line"),
                            }
                            break
                    else:
                        sources[arg] = None
                item["sources"] = sources
            if item.get("_content") is not None:
                done.append(item)
        for item in items:
            item.pop("_content", None)
            item.pop("_call", None)


def _score(entry: dict) -> float | None:
    prob, binding = entry.get("prob"), entry.get("binding")
    if isinstance(prob, int | float) and isinstance(binding, int | float):
        return prob * binding
    return None


def _latency_ms(call, result) -> int | None:
    """Milliseconds from the call sent to its answer (None: unanswered, or no times)."""
    if result is None or not result.t_ms or not call.sent_ms:
        return None
    return max(0, result.t_ms - call.sent_ms)
