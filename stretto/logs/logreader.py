"""The one reader of stretto's JSON-lines logs — a session log and the flow log beside it —
with a policy for the lines it cannot use.

- `strict` raises LogError, naming the file, the line and the field (the CLI's readers,
  evaluate's labelling, `stretto redact`);
- `skip` drops the line, counts it and names the first few (the console shows a log
  whatever is wrong with some of its lines);
- `quarantine` sets the line aside with its bytes and the problem, as the warehouse's
  quarantine table keeps them, for a caller that reports or stores them.

Whatever the policy, a torn last line (no newline and not JSON: a crash mid-write) is dropped
and kept as `torn`, and each caller says how it tells of it; and a log's first line, its
header, is read strictly: a log that does not begin readably is no log.

Only `\\n` ends a line (a JSON string may hold `\\r` or U+2028), and a line's JSON is read at
any depth (stretto.logs.deepjson).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from stretto.logs.deepjson import loads_deep

Policy = Literal["strict", "skip", "quarantine"]
NAMED = 20  # under `skip`, the lines named one by one; the rest are only counted


class LogError(ValueError):
    """A log that cannot be read; the message names the file, line and field."""

    def __init__(self, path: Path | str, line: int | None, problem: str, field: str | None = None):
        self.path = str(path)
        self.line = line
        self.field = field
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        what = f"field `{field}`: {problem}" if field else problem
        super().__init__(f"{where}: {what}")


@dataclass(frozen=True)
class BadLine:
    """A line set aside: what is wrong with it, and (under `quarantine`, and for a torn line)
    its bytes."""

    error: LogError
    text: bytes = b""

    @property
    def number(self) -> int:
        return self.error.line or 0

    @property
    def problem(self) -> str:
        """The problem with the file and line: `path:line: field `x`: ...`."""
        return str(self.error)


def loads(piece: bytes) -> Any:
    """A log line's JSON value, at any depth: the proxy logs a message nested deeper than
    Python's recursion limit (~1,000 levels) as the JSON it is."""
    try:
        return json.loads(piece)
    except RecursionError:
        return loads_deep(piece.decode("utf-8"))


class LineReader:
    """Reads a log from a binary stream one line at a time (a large log is never held whole),
    remembering each line's byte offset and the lines it could not use."""

    def __init__(self, source: BinaryIO, path: Path | str, policy: Policy = "strict") -> None:
        self.source, self.path, self.policy = source, path, policy
        self.offsets = array("q")  # the byte offset of every line, blank ones too
        self.bad: list[BadLine] = []  # skipped (the first NAMED) or quarantined
        self.skipped = 0  # lines set aside, named or not (a torn line is not among them)
        self.torn: BadLine | None = None
        self._at = 0  # the byte offset of the next line
        self._piece = b""  # the line just read

    def header(self) -> tuple[int, Any] | None:
        """The first non-blank line's number and JSON value; None when there is none (or it
        is torn). Strict whatever the policy: a log that does not begin readably is no log."""
        return self._read()

    def values(self) -> Iterator[tuple[int, Any]]:
        """Each further non-blank line's number and JSON value, in file order; a line that is
        not JSON goes by the policy."""
        while True:
            try:
                got = self._read()
            except LogError as error:
                self.reject(error)
                continue
            if got is None:
                return
            yield got

    def reject(self, error: LogError) -> None:
        """The line just read cannot be used (`error` names it): raised under `strict`, else
        set aside."""
        if self.policy == "strict":
            raise error from None
        self.skipped += 1
        if self.policy == "quarantine":
            self.bad.append(BadLine(error, self._piece))
        elif len(self.bad) < NAMED:
            self.bad.append(BadLine(error))

    def torn_notice(self) -> str | None:
        """What to say of a torn last line, if there was one."""
        if self.torn is None:
            return None
        return (
            f"{self.path}:{self.torn.number}: the last line is cut off (a crash mid-write?); "
            "dropped it"
        )

    def _read(self) -> tuple[int, Any] | None:
        """The next non-blank line's number and JSON value; LogError when it is not JSON, but
        for a torn last line: kept as `torn`, and the end (None)."""
        while piece := self.source.readline():
            self.offsets.append(self._at)
            self._at += len(piece)
            if not piece.strip():
                continue
            number, self._piece = len(self.offsets), piece
            try:
                return number, loads(piece)
            except (ValueError, RecursionError) as exc:
                error = LogError(self.path, number, f"not JSON ({exc})")
            if not piece.endswith(b"\n"):  # only the last line can lack its newline
                self.torn = BadLine(error, piece)
                return None
            raise error
        return None


# --- the flow log -----------------------------------------------------------------------------


@dataclass
class FlowLog:
    """A flow log's lines (decision and run lines, docs/formats.md), each a JSON object with
    its line number, and what the reader set aside."""

    path: Path
    entries: list[tuple[int, dict]]
    reader: LineReader


FLOW_LOG_SUFFIX = ".flow.jsonl"


def flow_log_of(session_log: Path) -> Path:
    """The flow log beside a session log: `<session>.flow.jsonl` (the proxy names it so)."""
    return session_log.with_name(session_log.name.removesuffix(".jsonl") + FLOW_LOG_SUFFIX)


def session_log_of(flow_log: Path) -> Path:
    """The session log a flow log is beside, the inverse of `flow_log_of`: `<session>.jsonl`."""
    return flow_log.with_name(flow_log.name.removesuffix(FLOW_LOG_SUFFIX) + ".jsonl")


def read_flow_log(path: Path, policy: Policy = "strict", required: tuple[str, ...] = ()) -> FlowLog:
    """Read a flow log: every line a JSON object holding the `required` fields."""
    entries: list[tuple[int, dict]] = []
    with path.open("rb") as f:
        reader = LineReader(f, path, policy)
        for number, value in reader.values():
            if not isinstance(value, dict):
                problem = LogError(path, number, "a flow log line must be a JSON object")
                reader.reject(problem)
                continue
            missing = [name for name in required if name not in value]
            if missing:
                problem = LogError(path, number, "missing", missing[0])
                reader.reject(problem)
                continue
            entries.append((number, value))
    return FlowLog(path, entries, reader)
