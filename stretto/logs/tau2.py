"""τ²-bench results files as session logs (../shared/spec/formats.md §5.8; docs/formats.md §1.4).

Each simulation of a results file becomes one session log, exactly as stretto-proxy would
have written it had the agent's tools been an MCP server behind the proxy: a header, the
`initialize` and `tools/list` exchanges, the customer's and the agent's words as `context`
lines, each of the agent's calls as a `tools/call` from the client and its result as the
server's answer. `stretto import-tau2` writes these logs; `stretto compile` and the replays
read them in memory with the same reader (`episodes_from_results`), so every command sees a
simulation the same way.

τ²-bench's split and tools files (and the reader of every τ²-bench file, gzip-compressed or
not) are stretto.logs.tau2_inputs's.

What is left out: the scripted greeting (the first message, from the assistant, with no
calls and no cost), the customer's own tool calls and their results (telecom's phone tools,
requestor `user`), and results that answer no call.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard

from stretto.home import make_private, private_dirs
from stretto.logs.episode import Episode, episode_from_log
from stretto.logs.sessionlog import LogError, parse_session_log
from stretto.logs.tau2_inputs import agent_tools, json_kind, load_json, load_tools
from stretto.vocabulary import LOG_VERSION, PROTOCOL_VERSION, SAME_TURN_MS

CLIENT_NAME = "tau2-bench"
ROLES = ("assistant", "user", "tool")
# The text of an assistant message that also made calls: kept in the first call's `_meta`,
# because a `context` line from the assistant would read as a reply (an LLM turn of its own).
CONTENT_META = "tau2/content"


@dataclass
class Simulation:
    """One simulation of a results file, converted to a session log."""

    session: str
    task_id: str
    trial: int
    reward: float
    text: str  # the session log
    source: str  # `<results file>#<simulation id>`
    calls: int = 0  # the agent's calls kept
    user_calls: int = 0  # the customer's calls left out
    orphan_results: int = 0  # tool results that answered no call, left out


@dataclass
class ResultsFile:
    path: Path
    domain: str
    agent_model: str | None
    simulations: list[Simulation] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.simulations)

    @property
    def user_calls(self) -> int:
        return sum(s.user_calls for s in self.simulations)


# converting a results file -------------------------------------------------------------------


def _dumps(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        text.encode("utf-8")  # a lone surrogate cannot be written as UTF-8: escape it
        return text
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"))


def _unix_ms(stamp: Any) -> int | None:
    """ms since the epoch of an ISO timestamp (one without a zone is UTC)."""
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _text(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else _dumps(content)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _safe_name(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(value)) or "_"


class _LogWriter:
    """The lines of one session log, with `t_ms` that never decreases."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.clock = 0
        self.after_result = False  # the last line written was a tool result

    def write(self, sender: str, message: dict, t_ms: int) -> None:
        self.clock = max(self.clock, t_ms)
        self.lines.append(f'{{"t_ms":{self.clock},"from":"{sender}","message":{_dumps(message)}}}')

    def next_time(self, real_ms: int | None, gap: int = 1) -> int:
        return max(self.clock + gap, real_ms if real_ms is not None else 0)


def _check(condition: bool, path: Path, where: str, problem: str) -> None:
    if not condition:
        raise LogError(path, None, problem, where)


def convert_simulation(
    path: Path,
    index: int,
    sim: Any,
    *,
    domain: str,
    agent_model: str | None,
    file_key: str,
    file_started_ms: int | None,
    tool_list: list[dict] | None,
    client_version: str,
) -> Simulation:
    """Simulation `index` of a results file (`sim`, as parsed) converted to a session log;
    LogError names `path` and the field that is wrong. stretto.logs.tau2_query reads one
    conversation the same way."""
    where = f"simulations[{index}]"
    _check(isinstance(sim, dict), path, where, "expected a simulation object")
    for name in ("id", "task_id"):
        value = sim.get(name)
        _check(
            isinstance(value, str | int) and not isinstance(value, bool),
            path,
            f"{where}.{name}",
            "missing; every simulation has an id and a task_id",
        )
    messages = sim.get("messages")
    _check(isinstance(messages, list), path, f"{where}.messages", "expected a list of messages")
    trial = sim.get("trial")
    trial = trial if isinstance(trial, int) and not isinstance(trial, bool) else 0
    reward_info = sim.get("reward_info")
    reward = reward_info.get("reward") if isinstance(reward_info, dict) else None
    # A simulation without a reward was not scored a success (the reference's default, 0).
    reward = float(reward) if _is_number(reward) else 0.0
    started_ms = _unix_ms(sim.get("start_time"))
    first_stamp = next(
        (m.get("timestamp") for m in messages if isinstance(m, dict) and m.get("timestamp")), None
    )
    origin = started_ms if started_ms is not None else _unix_ms(first_stamp)
    session = f"tau2-{_safe_name(domain)}-{file_key}-{_safe_name(sim['id'])}"
    header = {
        "stretto_mcp_log": LOG_VERSION,
        "session": session,
        "started_unix_ms": started_ms if started_ms is not None else (file_started_ms or 0),
        "server_command": [],
        "domain": domain,
        "agent_model": agent_model,
        "task_id": str(sim["task_id"]),
        "trial": trial,
        "reward": reward,
        "tau2_file": path.name,
        "tau2_simulation": str(sim["id"]),
    }
    log = _LogWriter()
    log.write(
        "client",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": CLIENT_NAME, "version": client_version},
            },
        },
        0,
    )
    log.write(
        "server",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": f"tau2-{domain}", "version": "1"},
            },
        },
        0,
    )
    log.write("client", {"jsonrpc": "2.0", "method": "notifications/initialized"}, 0)
    if tool_list is not None:
        log.write("client", {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}, 0)
        log.write("server", {"jsonrpc": "2.0", "id": 2, "result": {"tools": tool_list}}, 0)

    out = Simulation(session, str(sim["task_id"]), trial, reward, "", f"{path}#{sim['id']}")
    pending: dict[str, deque[str | None]] = {}  # τ² call id -> our call ids (None: the user's)
    used_ids: set[str] = set()
    for number, message in enumerate(messages):
        at = f"{where}.messages[{number}]"
        _check(isinstance(message, dict), path, at, "expected a message object")
        role = message.get("role")
        _check(role in ROLES, path, f"{at}.role", f"expected one of {', '.join(ROLES)}")
        calls = message.get("tool_calls") or []
        _check(isinstance(calls, list), path, f"{at}.tool_calls", "expected a list of calls")
        if number == 0 and role == "assistant" and not calls and not message.get("cost"):
            continue  # the scripted greeting
        origin_ms = _unix_ms(message.get("timestamp"))
        real = origin_ms - origin if origin_ms is not None and origin is not None else None
        if role == "tool":
            waiting = pending.get(_text(message.get("id")))
            if not waiting:
                out.orphan_results += 1
                continue
            call_id = waiting.popleft()
            if call_id is None:
                continue  # the answer to one of the customer's own calls
            failed = bool(message.get("error"))
            result = {
                "content": [{"type": "text", "text": _text(message.get("content"))}],
                "isError": failed,
            }
            log.write(
                "server", {"jsonrpc": "2.0", "id": call_id, "result": result}, log.next_time(real)
            )
            log.after_result = True
            continue
        text = _text(message.get("content"))
        agent_calls = []
        for k, call in enumerate(calls):
            _check(
                isinstance(call, dict) and isinstance(call.get("name"), str),
                path,
                f"{at}.tool_calls[{k}].name",
                "expected a call with a tool name",
            )
            tau2_id = _text(call.get("id"))
            if role == "assistant" and (call.get("requestor") or "assistant") == "assistant":
                agent_calls.append((tau2_id, call))
            else:
                pending.setdefault(tau2_id, deque()).append(None)
                out.user_calls += 1
        if not agent_calls:
            if text.strip():
                log.write("context", {"role": role, "content": text}, log.next_time(real))
                log.after_result = False
            continue
        # The calls of one message are one LLM turn: sent together, before any result, and
        # (past SAME_TURN_MS after the last result) never joined to the turn before.
        sent = log.next_time(real, SAME_TURN_MS + 1 if log.after_result else 1)
        for k, (tau2_id, call) in enumerate(agent_calls):
            call_id = tau2_id or f"call-{len(used_ids) + 1}"
            if call_id in used_ids:  # τ² ids may repeat (or be empty): ours are unique
                n = 2
                while f"{call_id}#{n}" in used_ids:
                    n += 1
                call_id = f"{call_id}#{n}"
            used_ids.add(call_id)
            pending.setdefault(tau2_id, deque()).append(call_id)
            arguments = call.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    pass
            if arguments is None:
                arguments = {}
            _check(
                isinstance(arguments, dict),
                path,
                f"{at}.tool_calls[{k}].arguments",
                "expected an object of arguments",
            )
            params: dict[str, Any] = {"name": call["name"], "arguments": arguments}
            if k == 0 and text.strip():
                params["_meta"] = {CONTENT_META: text}
            log.write(
                "client",
                {"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": params},
                sent,
            )
            out.calls += 1
        log.after_result = False
    out.text = "\n".join([_dumps(header), *log.lines]) + "\n"
    return out


def read_results(
    path: str | Path, tools: str | Path | dict | None = None, domain: str | None = None
) -> ResultsFile:
    """Convert every simulation of a τ²-bench results file to a session log.

    `tools`: a tools file (or `load_tools`' answer, or the file's content) giving the domain's
    tool kinds for the `tools/list` answer; None writes no `tools/list` exchange. `domain`:
    refuse a results file of another domain (and name it, should the file not)."""
    path = Path(path)
    value, data = load_json(path)
    if not isinstance(value, dict):
        raise LogError(
            path,
            None,
            f"not a τ²-bench results file: expected an object with `info` and `simulations`, "
            f"got {json_kind(value)}",
        )
    if not isinstance(value.get("simulations"), list):
        raise LogError(
            path,
            None,
            "not a τ²-bench results file: it has no `simulations` list "
            f"(its keys: {', '.join(sorted(map(str, value))) or 'none'})",
        )
    info = value.get("info")
    if not isinstance(info, dict):
        raise LogError(path, None, "not a τ²-bench results file: it has no `info` object")
    environment = info.get("environment_info")
    named = environment.get("domain_name") if isinstance(environment, dict) else None
    if isinstance(named, str) and named:
        if domain is not None and named != domain:
            raise LogError(path, None, f"a results file of the {named} domain, not {domain}")
        domain = named
    if domain is None:
        raise LogError(
            path, None, "missing (or give the domain)", "info.environment_info.domain_name"
        )
    agent = info.get("agent_info")
    agent_model = agent.get("llm") if isinstance(agent, dict) else None
    agent_model = agent_model if isinstance(agent_model, str) and agent_model else None
    tool_list = None
    if tools is not None:
        by_domain = tools if _is_loaded(tools) else load_tools(tools)
        if domain not in by_domain:
            known = ", ".join(sorted(by_domain)) or "none"
            where = tools if isinstance(tools, str | Path) else "<tools>"
            raise LogError(where, None, f"no tools for the {domain} domain (it has: {known})")
        tool_list = agent_tools(by_domain[domain])
    commit = info.get("git_commit")
    result = ResultsFile(path, domain, agent_model)
    file_key = hashlib.blake2b(data, digest_size=4).hexdigest()
    seen: set[str] = set()
    for index, sim in enumerate(value["simulations"]):
        converted = convert_simulation(
            path,
            index,
            sim,
            domain=domain,
            agent_model=agent_model,
            file_key=file_key,
            file_started_ms=_unix_ms(value.get("timestamp")),
            tool_list=tool_list,
            client_version=commit if isinstance(commit, str) and commit else "unknown",
        )
        if converted.session in seen:  # two simulation ids that read the same as file names
            base, n = converted.session, 2
            while f"{base}-{n}" in seen:
                n += 1
            converted = _renamed(converted, f"{base}-{n}")
        seen.add(converted.session)
        result.simulations.append(converted)
    return result


def _is_loaded(tools: Any) -> TypeGuard[dict[str, list[dict]]]:
    """`load_tools`' answer (domain -> entries), not a tools file's content."""
    return isinstance(tools, dict) and "domains" not in tools


def _renamed(sim: Simulation, session: str) -> Simulation:
    header, _, rest = sim.text.partition("\n")
    value = json.loads(header)
    value["session"] = session
    sim.session = session
    sim.text = _dumps(value) + "\n" + rest
    return sim


def write_logs(results: ResultsFile, out: str | Path) -> list[Path]:
    """Write each simulation's log to `out/<session>.jsonl` (a file already holding the same
    log is left as it is, so re-importing changes nothing); the paths. Private, as the
    proxy's logs: files 0600, folders 0700."""
    out = private_dirs(out)
    written = []
    for sim in results.simulations:
        target = out / f"{sim.session}.jsonl"
        data = sim.text.encode("utf-8")
        if not (target.is_file() and target.read_bytes() == data):
            partial = target.with_name(f".{target.name}.partial")
            partial.write_bytes(data)
            make_private(partial)
            os.replace(partial, target)
        written.append(target)
    return written


def episodes_from_results(
    paths: Iterable[str | Path] | str | Path,
    tools: str | Path | dict | None = None,
    *,
    domain: str | None = None,
) -> list[Episode]:
    """The episodes of τ²-bench results files, file by file in simulation order: each
    simulation's session log, read by the session-log and episode readers. Each episode has
    the simulation's task_id, trial and reward."""
    if isinstance(paths, str | Path):
        paths = [paths]
    loaded = load_tools(tools) if tools is not None and not _is_loaded(tools) else tools
    episodes = []
    for path in paths:
        for sim in read_results(path, loaded, domain).simulations:
            log = parse_session_log(sim.text.encode("utf-8"), sim.source)
            episodes.append(episode_from_log(log))
    return episodes
