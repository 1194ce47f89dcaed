"""What is in the data directory: session logs and flows, wherever they sit under it (the
proxy's `logs/<domain>/`, a walkthrough's folders, `flows/`, `reports/`), each read once per
version of the file and kept.

A session is known by its session id, never by its path: copies of one log (the same id and
content) are one session; should two files share an id with different content, each gets
the id with a short content hash. A file that cannot be read is listed with what is wrong.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from stretto.console import adapter
from stretto.console.views.sessionindex import Index, index_session

MAX_DEPTH = 6
SCAN_TTL_S = 1.0  # a burst of requests shares one walk of the folders
INDEXES_KEPT = 16  # full session indexes kept in memory (summaries are kept for all)


@dataclass
class SessionEntry:
    key: str
    path: Path
    rel: str
    summary: dict
    copies: list[str] = field(default_factory=list)


@dataclass
class FlowEntry:
    name: str  # its path under the data directory
    path: Path
    flow: dict | None
    error: str | None
    modified_unix_ms: int
    # "served": flows/<domain>.flow.json, the flow the proxy serves for its domain;
    # "staged": <name>.staged.flow.json, staged beside `staged_beside` (not served); else None
    role: str | None = None
    staged_beside: str | None = None


Stamp = tuple[int, int] | None  # (size, mtime_ns) of a file's version; None: gone


def _stamp(path: Path) -> Stamp:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


stamp_of = _stamp  # a file's version, for what keeps results per version of its inputs


def content_hash(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Catalog:
    def __init__(self, data: Path) -> None:
        self.data = data
        self.skip = adapter.unscanned(data)  # folders at the top with no sessions or flows
        self.lock = threading.RLock()
        self._scan_at = 0.0
        self._scan: tuple[list[Path], list[Path]] = ([], [])
        self._summaries: dict[Path, tuple[Stamp, dict]] = {}
        self._hashes: dict[Path, tuple[Stamp, str]] = {}
        self._indexes: OrderedDict[Path, tuple[Stamp, Index]] = OrderedDict()
        self._flows: dict[Path, tuple[Stamp, FlowEntry]] = {}
        self._building: dict[Path, threading.Lock] = {}
        self._episodes: dict[Path, tuple[Stamp, object]] = {}

    # the folders ---------------------------------------------------------------------------

    def scan(self, fresh: bool = False) -> tuple[list[Path], list[Path]]:
        """(session logs, flow files) under the data directory, in path order."""
        with self.lock:
            if not fresh and time.monotonic() - self._scan_at < SCAN_TTL_S:
                return self._scan
        logs: list[Path] = []
        flows: list[Path] = []
        self._walk(self.data, 0, logs, flows)
        with self.lock:
            self._scan = (sorted(logs), sorted(flows))
            self._scan_at = time.monotonic()
            return self._scan

    def _walk(self, folder: Path, depth: int, logs: list, flows: list) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name.endswith(adapter.HISTORY_SUFFIX):
                    continue  # a flow's committed versions: shown on its page, not as flows
                if depth < MAX_DEPTH and not (depth == 0 and entry.name in self.skip):
                    self._walk(Path(entry.path), depth + 1, logs, flows)
            elif entry.is_file():
                path = Path(entry.path)
                if entry.name.endswith(".flow.json"):
                    flows.append(path)
                elif adapter.is_session_log(path):
                    logs.append(path)

    def signature(self) -> tuple:
        """Changes when a log or flow is added, removed or written (for `changed` events)."""
        logs, flows = self.scan(fresh=True)
        return tuple((str(p), _stamp(p)) for p in [*logs, *flows])

    # sessions ------------------------------------------------------------------------------

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.data))

    def shown(self, message: str) -> str:
        """A message with the paths in it relative to the data directory."""
        return message.replace(f"{self.data}/", "")

    def _summary(self, path: Path) -> dict:
        stamp = _stamp(path)
        with self.lock:
            known = self._summaries.get(path)
            if known and known[0] == stamp:
                return known[1]
        try:
            summary = self.index(path).summary
        except adapter.LogError as exc:
            summary = {"id": None, "problem": str(exc), "unreadable": True}
        except OSError as exc:
            summary = {"id": None, "problem": f"{path}: cannot read: {exc.strerror or exc}"}
            summary["unreadable"] = True
        summary = dict(summary, size_bytes=stamp[0] if stamp else 0)
        if summary.get("problem"):
            summary["problem"] = self.shown(summary["problem"])
        with self.lock:
            self._summaries[path] = (stamp, summary)
        return summary

    def index(self, path: Path) -> Index:
        """The session log's index, built once per version of the file."""
        with self.lock:
            lock = self._building.setdefault(path, threading.Lock())
        with lock:  # one reader builds it; the others wait for it
            stamp = _stamp(path)
            with self.lock:
                known = self._indexes.get(path)
                if known and known[0] == stamp:
                    self._indexes.move_to_end(path)
                    return known[1]
            built = index_session(path)
            with self.lock:
                self._indexes[path] = (stamp, built)
                while len(self._indexes) > INDEXES_KEPT:
                    self._indexes.popitem(last=False)
            return built

    def _hash(self, path: Path) -> str:
        stamp = _stamp(path)
        with self.lock:
            known = self._hashes.get(path)
            if known and known[0] == stamp:
                return known[1]
        digest = content_hash(path)
        with self.lock:
            self._hashes[path] = (stamp, digest)
        return digest

    def sessions(self) -> list[SessionEntry]:
        """Every session, newest first; copies of one log are one session."""
        logs, _ = self.scan()
        by_id: dict[str, list[tuple[Path, dict]]] = {}
        entries = []
        for path in logs:
            summary = self._summary(path)
            if summary.get("id") is None:
                key = "unreadable~" + self.rel(path).replace("/", "~")
                entries.append(SessionEntry(key, path, self.rel(path), summary))
            else:
                by_id.setdefault(summary["id"], []).append((path, summary))
        for session, files in by_id.items():
            files.sort(key=lambda f: _preference(f[1], self.rel(f[0])))
            variants: dict[str, list[tuple[Path, dict]]] = {}
            if len(files) == 1:
                variants[""] = files
            else:
                for path, summary in files:
                    variants.setdefault(self._hash(path), []).append((path, summary))
            for digest, copies in variants.items():
                key = session if len(variants) == 1 else f"{session}@{digest[:8]}"
                path, summary = copies[0]
                rels = [self.rel(p) for p, _ in copies[1:]]
                entries.append(SessionEntry(key, path, self.rel(path), summary, rels))
        entries.sort(key=lambda e: (-(e.summary.get("started_unix_ms") or 0), e.key))
        return entries

    def session(self, key: str) -> SessionEntry | None:
        for entry in self.sessions():
            if entry.key == key:
                return entry
        return None

    def readable_sessions(
        self, domain: str, modes: tuple[str, ...] | None = None
    ) -> list[SessionEntry]:
        """The sessions of a domain that can be read (every mode, or those of `modes`)."""
        return [
            e
            for e in self.sessions()
            if e.summary.get("domain") == domain
            and (modes is None or e.summary.get("mode") in modes)
            and not e.summary.get("problem")
        ]

    def episodes(self, domain: str, modes: tuple[str, ...] | None = ("recorded",)) -> list:
        """The sessions of a domain as episodes: by default the recorded ones (no flow
        served), for replays; `modes` None: every one (recorded, shadow, served), for drift."""
        return [self.episode(e.path) for e in self.readable_sessions(domain, modes)]

    def episode(self, path: Path):
        """The session log at `path` as an episode, read once per version of the file."""
        stamp = _stamp(path)
        with self.lock:
            known = self._episodes.get(path)
            if known and known[0] == stamp:
                return known[1]
        episode = adapter.read_episode(path)
        with self.lock:
            self._episodes[path] = (stamp, episode)
        return episode

    # flows ---------------------------------------------------------------------------------

    def flows(self) -> list[FlowEntry]:
        _, paths = self.scan()
        return [self._flow(p) for p in paths]

    def flow(self, name: str) -> FlowEntry | None:
        for entry in self.flows():
            if entry.name == name:
                return entry
        return None

    def _flow(self, path: Path) -> FlowEntry:
        stamp = _stamp(path)
        with self.lock:
            known = self._flows.get(path)
            if known and known[0] == stamp:
                return known[1]
        try:
            flow, error = adapter.load_flow(path), None
        except adapter.FlowError as exc:
            flow, error = None, self.shown(str(exc))
        modified = (stamp[1] // 1_000_000) if stamp else 0
        entry = FlowEntry(self.rel(path), path, flow, error, modified)
        beside = adapter.staged_beside(path)
        if beside is not None:
            entry.role, entry.staged_beside = "staged", self.rel(beside)
        elif flow is not None:
            if path == adapter.default_flow(self.data, flow["manifest"]["domain"]):
                entry.role = "served"
        with self.lock:
            self._flows[path] = (stamp, entry)
        return entry


def _preference(summary: dict, rel: str) -> tuple:
    """Which copy of a session stands for it: one with a flow log, then the proxy's own
    folder (logs/), then by path."""
    return (not summary.get("has_flow_log"), not rel.startswith("logs/"), rel)
