"""Versioned flows: `stretto flow-commit`, `flow-log` and `flow-rollback` (issue 18; spec
../shared/spec/formats.md §5.7).

Beside a flow `<name>.flow.json` its history lives in `<name>.history/`:

- `<sha256>.flow.json`: every version ever committed, byte for byte, named by the SHA-256 of
  its bytes (content-addressed: a version committed twice is stored once);
- `<N>.json`: the N-th entry of the log (1, 2, …): `{version, action: commit|rollback,
  sha256, unix_ms, note, parent, to?, review, other}` — `parent` the entry that was current
  before, `to` the entry a rollback restored, `review`/`other` what the change does
  (stretto.offline.lifecycle.flowdiff.diff: changes that need review, and the rest).

The served flow is only ever replaced whole: written to a temporary file in its own folder,
flushed to disk, renamed over it, and the folder flushed. A proxy reads its flow once, when
its session starts, so a commit or a rollback reaches the next session, never a running one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from stretto.home import write_private
from stretto.model.flow import FlowError, validate
from stretto.offline.lifecycle.flowdiff import diff

HISTORY = ".history"  # the folder of a flow's versions: <name>.history/


class VersionError(ValueError):
    pass


def _name(flow_path: Path) -> str:
    name = flow_path.name
    return name[: -len(".flow.json")] if name.endswith(".flow.json") else name


def history_dir(flow_path: str | Path) -> Path:
    flow_path = Path(flow_path)
    return flow_path.with_name(_name(flow_path) + HISTORY)


def staged_path(flow_path: str | Path) -> Path:
    """`<name>.staged.flow.json` beside `<name>.flow.json` (`F.staged` for other names)."""
    flow_path = Path(flow_path)
    if flow_path.name.endswith(".flow.json"):
        return flow_path.with_name(f"{_name(flow_path)}.staged.flow.json")
    return flow_path.with_name(flow_path.name + ".staged")


def staged_beside(path: str | Path) -> Path | None:
    """The flow `path` is staged beside, the inverse of `staged_path`: `<name>.flow.json` for
    `<name>.staged.flow.json`, `F` for `F.staged`; None when `path` is no staged flow."""
    path = Path(path)
    name = path.name
    if name.endswith(".staged.flow.json"):
        beside = path.with_name(name[: -len(".staged.flow.json")] + ".flow.json")
    elif name.endswith(".staged") and name != ".staged":
        beside = path.with_name(name[: -len(".staged")])
    else:
        return None
    # Only a round trip counts: staging `F.flow.json` writes `F.staged.flow.json`, so
    # `F.flow.json.staged` is no staged flow.
    return beside if staged_path(beside) == path else None


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` whole and privately (stretto.home.write_private)."""
    write_private(path, data)


def log(flow_path: str | Path) -> list[dict]:
    """Every entry of the flow's history, oldest first."""
    folder = history_dir(flow_path)
    if not folder.is_dir():
        return []
    entries = []
    for path in folder.glob("*.json"):
        if path.stem.isdigit() and not path.name.endswith(".flow.json"):
            try:
                entries.append(json.loads(path.read_text()))
            except ValueError as exc:
                raise VersionError(f"{path}: not JSON ({exc})") from None
    return sorted(entries, key=lambda e: e["version"])


def current(flow_path: str | Path) -> dict | None:
    """The entry whose flow is served now (the last), or None without a history."""
    entries = log(flow_path)
    return entries[-1] if entries else None


def version_bytes(flow_path: str | Path, entry: dict) -> bytes:
    path = history_dir(flow_path) / f"{entry['sha256']}.flow.json"
    data = path.read_bytes()
    if digest(data) != entry["sha256"]:
        raise VersionError(f"{path}: its bytes do not match its name (the copy was changed)")
    return data


def _load(data: bytes, source: str) -> dict:
    try:
        return validate(json.loads(data), source)
    except ValueError as exc:
        if isinstance(exc, FlowError):
            raise
        raise FlowError(f"{source}: not JSON ({exc})") from None


def _append(flow_path: Path, entry: dict) -> dict:
    """Write the next entry, refusing to overwrite one another writer made meanwhile."""
    folder = history_dir(flow_path)
    data = (json.dumps(entry, indent=1, ensure_ascii=False, sort_keys=True) + "\n").encode()
    path = folder / f"{entry['version']}.json"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise VersionError(
            f"{path}: another commit or rollback wrote this entry meanwhile; run again"
        ) from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return entry


def _keep(flow_path: Path, data: bytes) -> str:
    """Store a version's bytes under their SHA-256; its name."""
    folder = history_dir(flow_path)
    folder.mkdir(mode=0o700, exist_ok=True)
    sha = digest(data)
    copy = folder / f"{sha}.flow.json"
    if not copy.exists():
        write_atomically(copy, data)
    return sha


def _entry(version: int, action: str, sha: str, note: str, parent, old, new, now_ms) -> dict:
    review, other = diff(old, new) if old is not None else ([], [])
    return {
        "version": version,
        "action": action,
        "sha256": sha,
        "unix_ms": int(time.time() * 1000) if now_ms is None else now_ms,
        "note": note,
        "parent": parent,
        "review": review,
        "other": other,
    }


def commit(
    flow_path: str | Path,
    note: str,
    source: str | Path | None = None,
    *,
    comparison: dict | None = None,
    now_ms: int | None = None,
) -> dict:
    """Commit `source` (default: the staged flow beside the flow, else the flow itself) as the
    flow's next version and serve it. A flow served before its first commit is kept first as
    version 1. A committed staged file is removed (it is the flow now). The new entry;
    VersionError when there is nothing new to commit. `comparison`: what the decision rested
    on (e.g. the stage report's totals), kept in the entry."""
    flow_path = Path(flow_path)
    if not note.strip():
        raise VersionError("a commit needs a note (--note TEXT): why this version")
    staged = staged_path(flow_path)
    source = Path(source) if source else (staged if staged.exists() else flow_path)
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise VersionError(f"{source}: cannot read: {exc.strerror or exc}") from None
    new = _load(data, str(source))
    entries = log(flow_path)
    if not entries and flow_path.exists() and source != flow_path:
        served = flow_path.read_bytes()
        _load(served, str(flow_path))
        first = _entry(
            1,
            "commit",
            _keep(flow_path, served),
            "the flow served before the first commit",
            None,
            None,
            None,
            now_ms,
        )
        entries = [_append(flow_path, first)]
    last = entries[-1] if entries else None
    if last is not None and last["sha256"] == digest(data):
        raise VersionError(f"{source}: this is already the current version ({last['version']})")
    old = _load(version_bytes(flow_path, last), str(flow_path)) if last else None
    sha = _keep(flow_path, data)
    entry = _entry(
        len(entries) + 1, "commit", sha, note, last["version"] if last else None, old, new, now_ms
    )
    if comparison is not None:
        entry["comparison"] = comparison
    _append(flow_path, entry)
    if source != flow_path:
        write_atomically(flow_path, data)
        if source == staged:
            staged.unlink()
    return entry


def _commit_of(entries: dict[int, dict], version: int) -> dict:
    """The commit whose flow an entry serves (a rollback serves the one it restored)."""
    entry = entries[version]
    while entry["action"] == "rollback":
        entry = entries[entry["to"]]
    return entry


def rollback(
    flow_path: str | Path, to: int | None = None, note: str = "", now_ms: int | None = None
) -> dict:
    """Serve version `to` again (default: the commit before the one served now), restored
    byte for byte and atomically; the rollback is an entry of the log itself."""
    flow_path = Path(flow_path)
    entries = {e["version"]: e for e in log(flow_path)}
    if not entries:
        raise VersionError(
            f"{flow_path}: no committed versions to roll back to (flow-commit first)"
        )
    last = entries[max(entries)]
    if to is None:
        served = _commit_of(entries, last["version"])
        if served["parent"] is None:
            raise VersionError(
                f"{flow_path}: version {served['version']} is the first; nothing before it"
            )
        to = _commit_of(entries, served["parent"])["version"]
    if to not in entries:
        raise VersionError(
            f"{flow_path}: no version {to} (versions 1 to {max(entries)}; see flow-log)"
        )
    target = _commit_of(entries, to)
    data = version_bytes(flow_path, target)
    new = _load(data, f"version {to}")
    old_data = version_bytes(flow_path, _commit_of(entries, last["version"]))
    entry = _entry(
        last["version"] + 1,
        "rollback",
        target["sha256"],
        note or f"rolled back to version {to}",
        last["version"],
        _load(old_data, str(flow_path)),
        new,
        now_ms,
    )
    entry["to"] = target["version"]
    _append(flow_path, entry)
    write_atomically(flow_path, data)
    return entry


def log_markdown(flow_path: str | Path) -> str:
    entries = log(flow_path)
    out = [f"# Versions of {flow_path}", ""]
    if not entries:
        return "\n".join([*out, "No committed versions.", ""])
    out += [
        "| Version | When (UTC) | Action | Note | Needs review | Flow |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["unix_ms"] / 1000))
        action = f"rollback to {e['to']}" if e["action"] == "rollback" else "commit"
        out.append(
            f"| {e['version']} | {when} | {action} | {e['note']} | {len(e['review'])} | "
            f"`{e['sha256'][:12]}` |"
        )
    out.append("")
    out.append(f"Served now: {served(flow_path, entries)}")
    return "\n".join(out) + "\n"


def served(flow_path: str | Path, entries: list[dict] | None = None) -> str:
    """What the file at `flow_path` is, against its history: `version N.` when its bytes are
    the last entry's; else what it is (replaced outside flow-commit and flow-rollback)."""
    entries = log(flow_path) if entries is None else entries
    if not entries:
        return "no committed version."
    last = entries[-1]["version"]
    try:
        sha = digest(Path(flow_path).read_bytes())
    except FileNotFoundError:
        return f"nothing: {flow_path} is missing (`stretto flow-rollback --to {last}` restores it)."
    if sha == entries[-1]["sha256"]:
        return f"version {last}."
    same = [e["version"] for e in entries if e["sha256"] == sha]
    what = f"version {same[-1]}'s bytes" if same else "not a committed version"
    return (
        f"the file on disk is {what}: it was replaced since version {last} outside "
        f"flow-commit (`stretto flow-commit` commits it, `stretto flow-rollback --to {last}` "
        f"serves version {last} again)."
    )
