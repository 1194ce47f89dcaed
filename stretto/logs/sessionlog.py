"""Reading session-log files (format versions 1 and 2, docs/formats.md) line by line.

This layer checks the file's shape and nothing more: a header, then wire lines with
`t_ms`, `from` and exactly one of `message` / `raw`. The lines themselves are read by
`stretto.logs.logreader` (strictly here); turning them into an episode is
`stretto.logs.episode`'s job.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stretto.logs.logreader import FLOW_LOG_SUFFIX, LineReader, LogError
from stretto.vocabulary import LOG_VERSIONS_READ, LOG_VERSIONS_SAID

SENDERS = ("client", "server", "proxy", "context")
SIDE_FILE_SUFFIXES = (FLOW_LOG_SUFFIX, ".confirm.jsonl")


class TornLineWarning(UserWarning):
    """The last line of a log was cut off mid-write (a crash) and was dropped."""


@dataclass(frozen=True)
class Header:
    version: int
    session: str
    started_unix_ms: int
    server_command: list[str]
    domain: str | None
    agent_model: str | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WireLine:
    number: int  # 1-based line number in the file
    t_ms: int
    sender: str  # client | server | proxy | context
    message: Any = None  # the JSON value, when the wire line was JSON
    raw: str | None = None  # the text, when it was not

    @property
    def is_json(self) -> bool:
        return self.raw is None


@dataclass
class SessionLog:
    path: Path
    header: Header
    lines: list[WireLine]
    torn_last_line: bool = False
    size_bytes: int = 0


def is_session_log(path: Path) -> bool:
    name = path.name
    return name.endswith(".jsonl") and not name.endswith(SIDE_FILE_SUFFIXES)


def list_session_logs(directory: Path | str) -> list[Path]:
    """The session logs in `directory` (not flow or confirm logs), in name order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise LogError(directory, None, "not a directory of session logs")
    return sorted(p for p in directory.iterdir() if p.is_file() and is_session_log(p))


def parse_header(path: Path | str, value: Any, line: int = 1) -> Header:
    if not isinstance(value, dict):
        raise LogError(path, line, "the header must be a JSON object")
    if "stretto_mcp_log" not in value:
        raise LogError(path, line, "missing; this is not a stretto session log", "stretto_mcp_log")
    version = value["stretto_mcp_log"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise LogError(path, line, f"expected an integer, got {version!r}", "stretto_mcp_log")
    if version not in LOG_VERSIONS_READ:
        raise LogError(
            path,
            line,
            f"unknown session-log version {version} "
            f"(this stretto reads versions {LOG_VERSIONS_SAID})",
            "stretto_mcp_log",
        )
    session = value.get("session")
    if not isinstance(session, str) or not session:
        raise LogError(path, line, "expected a non-empty string", "session")
    started = value.get("started_unix_ms", 0)
    if not isinstance(started, int) or isinstance(started, bool):
        raise LogError(path, line, f"expected an integer, got {started!r}", "started_unix_ms")
    command = value.get("server_command", [])
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise LogError(path, line, "expected a list of strings", "server_command")
    for name in ("domain", "agent_model"):
        if value.get(name) is not None and not isinstance(value[name], str):
            raise LogError(path, line, f"expected a string or null, got {value[name]!r}", name)
    reward = value.get("reward")  # an optional extra: the episode's reward (τ²-bench imports)
    if reward is not None and (not isinstance(reward, int | float) or isinstance(reward, bool)):
        raise LogError(path, line, f"expected a number or null, got {reward!r}", "reward")
    known = {"stretto_mcp_log", "session", "started_unix_ms", "server_command", "domain"}
    extra = {k: v for k, v in value.items() if k not in known | {"agent_model"}}
    return Header(
        version=version,
        session=session,
        started_unix_ms=started,
        server_command=list(command),
        domain=value.get("domain"),
        agent_model=value.get("agent_model"),
        extra=extra,
    )


def parse_wire_line(path: Path | str, number: int, value: Any) -> WireLine:
    if not isinstance(value, dict):
        raise LogError(path, number, "a log line must be a JSON object")
    t_ms = value.get("t_ms")
    if not isinstance(t_ms, int) or isinstance(t_ms, bool) or t_ms < 0:
        raise LogError(path, number, f"expected a non-negative integer, got {t_ms!r}", "t_ms")
    sender = value.get("from")
    if sender not in SENDERS:
        raise LogError(
            path, number, f"expected one of {', '.join(SENDERS)}, got {sender!r}", "from"
        )
    has_message, has_raw = "message" in value, "raw" in value
    if has_message == has_raw:
        raise LogError(path, number, "a line needs exactly one of `message` and `raw`", "message")
    if has_raw:
        if not isinstance(value["raw"], str):
            raise LogError(path, number, "expected a string", "raw")
        return WireLine(number, t_ms, sender, raw=value["raw"])
    return WireLine(number, t_ms, sender, message=value["message"])


def read_session_log(path: Path | str) -> SessionLog:
    """Read one session log. Raises LogError for anything malformed but a torn last line,
    which is dropped with a TornLineWarning."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LogError(path, None, f"cannot read: {exc.strerror or exc}") from exc
    return parse_session_log(data, path)


def parse_session_log(data: bytes, path: Path | str) -> SessionLog:
    """Read a session log held in memory; `path` names it in errors and as its source."""
    path = Path(path)
    reader = LineReader(io.BytesIO(data), path, "strict")
    first = reader.header()
    header = None if first is None else parse_header(path, first[1], first[0])
    lines = [] if header is None else [parse_wire_line(path, n, v) for n, v in reader.values()]
    if (notice := reader.torn_notice()) is not None:
        warnings.warn(notice, TornLineWarning, stacklevel=2)
    if header is None:
        raise LogError(path, None, "empty: no header line")
    return SessionLog(
        path, header, lines, torn_last_line=reader.torn is not None, size_bytes=len(data)
    )
