"""Which log files an ingest run reads, and what becomes of each: sessions are identified by
their session id and content hash, never by their path.

- A path whose size and mtime are as last seen, and whose inode has not changed since (its
  ctime, which no copy or unpacking can set back, is before the commit that saw it), is not
  opened at all. Anything else is hashed: a log copied with `cp -p` or unpacked from an
  archive (an old mtime) is found by its content.
- A content (BLAKE2b of the bytes) already in the warehouse is not read again, wherever it
  now lies: a log copied to a second folder, moved into archive/, or a whole home copied
  adds nothing (the registry notes the new place; the sessions view shows it).
- A session id already in the warehouse with other content: the new content replaces the old
  when it extends it (the old bytes are its start: a log that grew) or lies at the same path
  (the log was rewritten); it is an earlier version when it is the start of the old one
  (nothing to add); otherwise it is a conflict: quarantined whole, with the reason, and the
  session keeps the content it has.
- Within one run the same rules pick one content per session id.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

from stretto.logs.sessionlog import is_session_log
from warehouse.layout import Layout
from warehouse.registry import State

HEADER_BYTES = 1 << 20  # a header longer than this is not read for its session id
# Hashing this many files or bytes goes to worker processes when the run has them (their
# start, ~0.5 s, is then worth it; below, threads here).
SPREAD_FILES = 4000  # (a run of more has more than one batch: warehouse/ingest/batches.py)
SPREAD_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LogFile:
    path: str  # absolute, to read it
    rel: str  # relative to the home, as stored
    size: int
    mtime_ns: int
    content_hash: str
    session: str | None  # the header's session id, when the header reads as JSON
    domain_hint: str  # the folder under logs/, for a file whose header cannot be read
    conflict: str | None = None  # why it is quarantined whole instead of ingested


@dataclass
class Plan:
    read: list[LogFile]  # files to read: to ingest, or to quarantine whole (conflicts)
    known: list[dict]  # registry rows of files whose content is already in (not read)
    unchanged: int  # files not opened (size and mtime as last seen)
    commits: int = 0  # registry commits when it was made: a later commit makes it stale
    logs: Path | None = None  # the folder it read, when not HOME/logs (the redacted copy)


def file_hash(path: str, limit: int | None = None) -> str:
    """BLAKE2b-128 of the file's bytes (its first `limit` bytes)."""
    digest = hashlib.blake2b(digest_size=16)
    left = limit if limit is not None else -1
    with open(path, "rb") as f:
        while left:
            chunk = f.read(1 << 20 if left < 0 else min(1 << 20, left))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk) if left > 0 else 0
    return digest.hexdigest()


def read_header(start: bytes) -> dict | None:
    """A log's header: the first non-blank line of `start` (the file's first bytes, a byte
    order mark aside), if it reads as a JSON object."""
    position = 0
    while position < len(start):
        end = start.find(b"\n", position)
        end = len(start) if end < 0 else end
        line = start[position:end].removeprefix(b"\xef\xbb\xbf").strip()
        position = end + 1
        if line:
            try:
                header = json.loads(line)
            except ValueError:
                return None
            return header if isinstance(header, dict) else None
    return None


def header_session(start: bytes) -> str | None:
    """The session id in a header (read_header), if it has one."""
    session = (read_header(start) or {}).get("session")
    return session if isinstance(session, str) and session else None


def hash_and_header(path: str) -> tuple[str, str | None]:
    """One read of the file: its content hash, and the session id of its header."""
    digest = hashlib.blake2b(digest_size=16)
    start = b""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            if len(start) < HEADER_BYTES:
                start += chunk[: HEADER_BYTES - len(start)]
            digest.update(chunk)
    return digest.hexdigest(), header_session(start)


@dataclass
class Walked:
    """Every session log under a folder, as columns (a million stat results held ~1 GB)."""

    paths: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    mtimes: list[int] = field(default_factory=list)  # ns
    ctimes: list[int] = field(default_factory=list)  # ns
    hints: list[str] = field(default_factory=list)  # the first folder under the logs folder


def _walk(logs: Path) -> Walked:
    """Every session log under `logs` (as os.walk would go: a folder's files in name order,
    then its folders, symbolic links to folders not followed), with its stat and domain hint
    (its first folder under `logs`). One stat per file: the listing says what is a folder."""
    found = Walked()

    def visit(folder: str, hint: str | None) -> None:
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            return
        folders = []
        for entry in entries:
            try:
                if entry.is_dir():
                    if not entry.is_symlink():
                        folders.append(entry)
                    continue
                if not is_session_log(Path(entry.name)):
                    continue
                stat = entry.stat()
            except OSError:  # gone since the listing
                continue
            if S_ISREG(stat.st_mode):
                found.paths.append(entry.path)
                found.sizes.append(stat.st_size)
                found.mtimes.append(stat.st_mtime_ns)
                found.ctimes.append(stat.st_ctime_ns)
                found.hints.append(hint or "mcp")
        for entry in folders:
            visit(entry.path, hint or entry.name)

    if logs.is_dir():
        visit(str(logs), None)
    return found


def _identify(path: str, size: int, mtime_ns: int, hint: str, rel: str) -> LogFile | None:
    try:
        digest, session = hash_and_header(path)
    except OSError:  # gone (moved or deleted) since the walk: the next run sees where
        return None
    return LogFile(path, rel, size, mtime_ns, digest, session, hint)


def _identify_all(chunk: list[tuple[str, int, int, str, str]]) -> list[LogFile | None]:
    return [_identify(*args) for args in chunk]


def discover(
    layout: Layout,
    state: State,
    threads: int = 4,
    logs: Path | None = None,
    pool: Executor | None = None,
) -> Plan:
    """The plan for the logs under HOME/logs (or `logs`, a folder under the home: the
    redacted copy, warehouse/ingest/redacted.py). The new and changed files are hashed on `pool`
    (the run's worker processes, warehouse/ingest/workers.py) when there are many, else in
    threads."""
    walked = _walk(logs or layout.logs)
    rels = [layout.relative(path) for path in walked.paths]
    unchanged = state.unchanged(rels, walked.sizes, walked.mtimes, walked.ctimes)
    changed = [
        (path, walked.sizes[i], walked.mtimes[i], walked.hints[i], rels[i])
        for i, path in enumerate(walked.paths)
        if i not in unchanged
    ]
    del walked, rels
    # files in chunks of 64 (a future per file cost the main thread ~0.3 s of CPU per 10,000
    # files). Threads hardly help (the GIL: 4 hashed 20,000 files no faster than 1), so many
    # files go to the worker processes, which the batches use next.
    chunks = [changed[i : i + 64] for i in range(0, len(changed), 64)]
    if pool is not None and (
        len(changed) >= SPREAD_FILES or sum(c[1] for c in changed) >= SPREAD_BYTES
    ):
        files = [f for chunk in pool.map(_identify_all, chunks) for f in chunk if f]
    else:
        with ThreadPoolExecutor(max_workers=threads) as threaded:
            files = [f for chunk in threaded.map(_identify_all, chunks) for f in chunk if f]
    found = plan(layout, state, files, len(unchanged))
    found.logs = logs
    return found


def _known(f: LogFile, note: str, session: str | None = None) -> dict:
    return {
        "path": f.rel,
        "size_bytes": f.size,
        "mtime_ns": f.mtime_ns,
        "content_hash": f.content_hash,
        "session": session or f.session,
        "status": "known",
        "note": note,
    }


def plan(layout: Layout, state: State, files: list[LogFile], unchanged: int) -> Plan:
    """Decide each file's fate (the module's rules)."""
    read: list[LogFile] = []
    known: list[dict] = []
    first_seen: dict[str, str] = {}
    by_session: dict[str, list[LogFile]] = {}
    contents = state.contents([f.content_hash for f in files])
    for f in files:
        if f.content_hash in contents:
            where = contents[f.content_hash][1]
            known.append(_known(f, "unchanged" if where == f.rel else f"same content as {where}"))
        elif f.content_hash in first_seen:
            known.append(_known(f, f"same content as {first_seen[f.content_hash]}"))
        else:
            first_seen[f.content_hash] = f.rel
            if f.session is None:
                read.append(f)  # its header decides (quarantined whole, or a session)
            else:
                by_session.setdefault(f.session, []).append(f)
    sessions = state.sessions(list(by_session))
    for session, group in by_session.items():
        current = sessions.get(session)
        # (content hash, size, path) of the session's content so far
        base = current
        chosen: LogFile | None = None
        for f in sorted(group, key=lambda f: (f.size, f.rel)):
            if base is None or f.rel == base[2] or _extends(f, base):
                if chosen is not None:  # an earlier version, from this same run
                    known.append(_known(chosen, f"an earlier version of {f.rel}"))
                chosen, base = f, (f.content_hash, f.size, f.rel)
            elif _starts(f, layout.absolute(base[2]), base):
                known.append(_known(f, f"an earlier version of {base[2]}"))
            else:
                why = (
                    f"session `{session}` is already in the warehouse from {base[2]}, with "
                    "other content: this copy is not ingested (give it a session id of its "
                    "own to keep both)"
                )
                read.append(_with_conflict(f, why))
        if chosen is not None:
            read.append(chosen)
    read.sort(key=lambda f: f.rel)
    return Plan(read, known, unchanged, state.commits)


def _with_conflict(f: LogFile, why: str) -> LogFile:
    return LogFile(f.path, f.rel, f.size, f.mtime_ns, f.content_hash, f.session, f.domain_hint, why)


def _extends(f: LogFile, base: tuple[str, int, str]) -> bool:
    """`f` begins with the bytes of `base` (a log that grew)."""
    return f.size > base[1] and file_hash(f.path, base[1]) == base[0]


def _starts(f: LogFile, base_path: Path, base: tuple[str, int, str]) -> bool:
    """`f` is the beginning of `base` (an earlier copy of a log that grew since)."""
    try:
        return base[1] > f.size and file_hash(str(base_path), f.size) == f.content_hash
    except OSError:
        return False
