"""`stretto redact`: a pseudonymised copy of a folder of session logs (and the flow log beside
each), from which learning learns the same flow (docs/formats.md §11). What is a value is
stretto.logs.redactwalk, what it becomes stretto.logs.pseudonyms; this module reads the
folder twice (the census, then the rewrite) and writes the copy, each file whole and private.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from stretto import home
from stretto.logs.logreader import FLOW_LOG_SUFFIX, flow_log_of, read_flow_log
from stretto.logs.pseudonyms import (
    KEEP_SHARED,
    SALT_ENV,
    SHORT,
    Census,
    Count,
    Pseudonyms,
    RedactError,
    dumps,
    fold,
)
from stretto.logs.redactwalk import Walk
from stretto.logs.sessionlog import (
    LogError,
    SessionLog,
    TornLineWarning,
    list_session_logs,
    parse_session_log,
)


@dataclass
class Report:
    """What `redact_folder` did."""

    out: Path
    sessions: int = 0
    flow_logs: int = 0
    hashed: int = 0  # distinct values and words hashed
    shared: int = 0  # kept because enough sessions share them
    declared: int = 0  # kept because the tools' schemas name them
    short: int = 0  # kept because they are 3 characters or fewer
    left_out: list[str] = field(default_factory=list)  # side files not copied, and why
    torn: list[str] = field(default_factory=list)  # files whose cut-off last line was dropped
    written: list[Path] = field(default_factory=list)  # the files of the copy


def salt_from_env(name: str = SALT_ENV) -> str:
    value = os.environ.get(name)
    if value is None:
        raise RedactError(
            f"{name} is not set: set it to a secret salt (the same salt gives "
            "the same tokens), or name another variable with --salt-env"
        )
    if not value.strip():
        raise RedactError(f"{name} is empty: set it to a secret salt")
    return value


def output_name(session: str) -> str:
    """A session id as a file name: characters other than letters, digits, `.`, `_` and `-`
    become `_`; a name that would read as a side file gets a `_`."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", session)
    return name + "_" if name.endswith((".flow", ".confirm")) or name in (".", "..") else name


def check_request(sessions: Path, out: Path, keep_shared: int = KEEP_SHARED) -> None:
    """Refuse what cannot be done as asked, before anything is read."""
    if keep_shared < 0:
        raise RedactError(f"--keep-shared must be 0 or more, not {keep_shared}")
    sessions, out = sessions.resolve(), out.resolve()
    if out == sessions or sessions in out.parents:
        raise RedactError(
            f"--out {out} is --sessions or inside it: write the redacted copy "
            "somewhere else, so no original is overwritten or mixed with it"
        )
    if out.exists() and not out.is_dir():
        raise RedactError(f"--out {out} is not a folder")


def _read(path: Path, report: Report) -> tuple[bytes, SessionLog]:
    data = path.read_bytes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TornLineWarning)
        log = parse_session_log(data, path)
    torn = any(issubclass(w.category, TornLineWarning) for w in caught)
    if torn and str(path) not in report.torn:
        report.torn.append(str(path))
    return data, log


def _flow_entries(path: Path, report: Report) -> list[dict]:
    """The lines of a flow log, read strictly; a cut-off last line is dropped (and reported)."""
    flow = read_flow_log(path, "strict")
    if flow.reader.torn is not None and str(path) not in report.torn:
        report.torn.append(str(path))
    return [entry for _, entry in flow.entries]


def _wire_text(line: dict) -> str:
    body = "raw" if "raw" in line else "message"
    value = dumps(line[body], separators=(",", ":"))
    return f'{{"t_ms":{line["t_ms"]},"from":{dumps(line["from"])},"{body}":{value}}}'


def _private_folder(folder: Path) -> None:
    missing = [p for p in [folder, *folder.parents] if not p.exists()]
    for path in reversed(missing):
        path.mkdir(mode=0o700)
        os.chmod(path, 0o700)


def write_private(path: Path, data: bytes) -> None:
    """Write a file whole or not at all, mode 0600 (stretto.home.write_private)."""
    home.write_private(path, data)


def _write_new(path: Path, data: bytes, report: Report) -> None:
    """`write_private`, unless the file already holds these bytes (a copy made again)."""
    report.written.append(path)
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return
    except OSError:
        pass
    write_private(path, data)


@dataclass
class _Plan:
    """The folder read once: each session log by its output name, the flow log beside it."""

    logs: dict[str, Path] = field(default_factory=dict)
    flow_logs: dict[str, Path] = field(default_factory=dict)
    census: Census = field(default_factory=Census)


def _plan(
    sessions: Path, hash_fields: Iterable[str], report: Report, lenient: bool = False
) -> _Plan:
    """The census of every session log in `sessions` (the first pass), every log and flow log
    read and refused if malformed — or, `lenient`, left out (`report.left_out` says why)."""
    fields = frozenset(fold(f.strip()) for f in hash_fields if f.strip())
    plan = _Plan(census=Census(hash_fields=fields))
    paths = list_session_logs(sessions)
    if not paths:
        raise RedactError(f"{sessions}: no session logs (*.jsonl) to redact")
    for index, path in enumerate(paths):
        try:
            log = _read(path, report)[1]
        except (LogError, OSError) as exc:
            if not lenient:
                raise
            report.left_out.append(f"{path.name} (cannot be read, so not redacted: {exc})")
            continue
        name = output_name(log.header.session)
        if name in plan.logs:  # one output file per session
            raise RedactError(
                f"{plan.logs[name]} and {path} are both session {log.header.session!r}"
            )
        plan.logs[name] = path
        plan.census.session = index
        walk = Walk(Count(plan.census))
        for line in log.lines:
            walk.line(line)
        flow = flow_log_of(path)
        if flow.is_file():
            _flow_entries(flow, report)
            plan.flow_logs[name] = flow
    kept = set(plan.flow_logs.values())
    for side in sorted(sessions.iterdir()):
        if side.name.endswith(".confirm.jsonl"):
            report.left_out.append(f"{side.name} (a confirm log: not redacted)")
        elif side.name.endswith(FLOW_LOG_SUFFIX) and side not in kept:
            report.left_out.append(f"{side.name} (a flow log of no session log here)")
    return plan


def pseudonyms_for(
    sessions: Path | str,
    salt: str,
    keep_shared: int = KEEP_SHARED,
    hash_fields: Iterable[str] = (),
) -> Pseudonyms:
    """What `redact_folder` would make of each value of the session logs in `sessions`."""
    plan = _plan(Path(sessions), hash_fields, Report(Path(".")))
    return Pseudonyms(salt, plan.census, keep_shared)


def redact_folder(
    sessions: Path | str,
    out: Path | str,
    salt: str,
    keep_shared: int = KEEP_SHARED,
    hash_fields: Iterable[str] = (),
    lenient: bool = False,
) -> Report:
    """Write a redacted copy of every session log in `sessions` (and the flow log beside
    each) to `out`, one file per session named by its id. Every log is read, and refused if
    malformed (`lenient`: left out, and said in the report), before anything is written; each
    file is written whole (0600, in a 0700 folder), and only when it is not there already
    with the same bytes."""
    sessions, out = Path(sessions), Path(out)
    check_request(sessions, out, keep_shared)
    report = Report(out)
    plan = _plan(sessions, hash_fields, report, lenient)
    pseudonyms = Pseudonyms(salt, plan.census, keep_shared)
    for key in plan.census.sessions:
        if pseudonyms.hashed(key):
            report.hashed += 1
        elif len(key) <= SHORT:
            report.short += 1
        elif key in plan.census.declared:
            report.declared += 1
        else:
            report.shared += 1
    _private_folder(out)
    for name, path in plan.logs.items():
        data, log = _read(path, report)
        walk = Walk(pseudonyms)
        lines = [_wire_text(walk.line(line)) + "\n" for line in log.lines]
        header = next(piece for piece in data.split(b"\n") if piece.strip())
        log_out = out / f"{name}.jsonl"
        _write_new(log_out, header + b"\n" + "".join(lines).encode("utf-8"), report)
        report.sessions += 1
        if name in plan.flow_logs:
            entries = [walk.flow_entry(e) for e in _flow_entries(plan.flow_logs[name], report)]
            text = "".join(dumps(e, sort_keys=True) + "\n" for e in entries)
            _write_new(flow_log_of(log_out), text.encode("utf-8"), report)
            report.flow_logs += 1
    fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(fd)  # the renames are on disk too
    finally:
        os.close(fd)
    return report
