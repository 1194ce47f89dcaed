"""`stretto-proxy --retain-days DAYS`: at start, delete what the proxy and its arbiter wrote
that was last written more than DAYS days ago — the session logs under `--record` (with the
flow and confirm logs beside them) and the answers in the oracle cache — and say what went.

Only files of the shapes stretto writes are touched (`*.jsonl` in the record folder itself,
`<ab>/<key>.json` in the cache); a file's age is its modification time, so a log still being
appended to by another proxy is never old. Nothing here follows a symbolic link.
"""

from __future__ import annotations

import os
import re
import time

DAY_S = 86_400
_CACHE_ENTRY = re.compile(r"[0-9a-f]{64}\.json")
_CACHE_FOLDER = re.compile(r"[0-9a-f]{2}")


def _old(entry: os.DirEntry, cutoff: float) -> bool:
    try:
        return entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff
    except OSError:
        return False


def _delete(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False  # another proxy's sweep got there first


def old_logs(record: str, cutoff: float) -> list[str]:
    """The session logs (and side logs) in `record` last written before `cutoff`."""
    try:
        entries = list(os.scandir(record))
    except OSError:
        return []
    return sorted(e.path for e in entries if e.name.endswith(".jsonl") and _old(e, cutoff))


def old_cache_entries(cache: str, cutoff: float) -> list[str]:
    """The oracle-cache entries (`<ab>/<key>.json`) last written before `cutoff`."""
    found = []
    try:
        folders = [e for e in os.scandir(cache) if _CACHE_FOLDER.fullmatch(e.name)]
    except OSError:
        return []
    for folder in folders:
        if not folder.is_dir(follow_symlinks=False):
            continue
        try:
            entries = list(os.scandir(folder.path))
        except OSError:
            continue
        found += [e.path for e in entries if _CACHE_ENTRY.fullmatch(e.name) and _old(e, cutoff)]
    return sorted(found)


def sweep(record: str | None, cache: str, days: int, now: float | None = None) -> str:
    """Delete the old logs and cache entries; one sentence saying what was deleted."""
    cutoff = (time.time() if now is None else now) - days * DAY_S
    logs = [p for p in old_logs(record, cutoff) if _delete(p)] if record else []
    sessions = sum(not p.endswith((".flow.jsonl", ".confirm.jsonl")) for p in logs)
    answers = [p for p in old_cache_entries(cache, cutoff) if _delete(p)]
    where = f" from {record}" if record else ""
    return (
        f"--retain-days {days}: deleted {sessions} session log(s) and "
        f"{len(logs) - sessions} flow/confirm log(s){where}, {len(answers)} oracle-cache "
        f"entr{'y' if len(answers) == 1 else 'ies'} from {cache}"
    )
