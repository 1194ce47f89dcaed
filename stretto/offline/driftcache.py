"""Drift's per-session values kept between runs, so that a drift check after an ingest scores
only the sessions it has not scored under the same flow (stretto.offline.drift).

A session's values — its decisions' sites, hits and log-probabilities, surprise, disagreement,
its steps after a tool result and those after a tool the flow never learned — depend only on
the flow and on the session's content, never on the other sessions: the series' start order,
the first use of each unknown tool and the change points are computed afresh from them on
every run (drift.detect), so a result from the cache is the result of scoring every session
again. The cache is one JSON file per (domain, decider): the flow's digest (its content, its
compile time aside), the decider asked, and one entry per session keyed by its id and content
hash (the warehouse's identity of a session, docs/formats.md §2). A file of another version,
another flow or decider, or one that does not read as this format is ignored and replaced
whole, never trusted; it is written atomically (temp file, fsync, rename) and private.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stretto.offline.drift import Drift, Scored, Settings, detect, score

if TYPE_CHECKING:
    from stretto.logs.episode import Episode

VERSION = 1  # the file's format and the scoring it holds: bump when either changes


@dataclass(frozen=True)
class Session:
    """A session as the warehouse knows it: its id, its content's hash, its log file."""

    id: str
    content_hash: str
    file: Path

    @property
    def key(self) -> str:
        return f"{self.id}\t{self.content_hash}"


@dataclass
class Outcome:
    result: Drift
    scored: int  # sessions read from their logs and scored in this run
    cached: int  # sessions whose values came from the cache


def flow_digest(flow: dict) -> str:
    """The flow's content, its compile time aside (two flows learned from the same sessions
    differ only there): SHA-256 of its canonical JSON."""
    provenance = {k: v for k, v in flow.get("provenance", {}).items() if k != "compiled_unix_ms"}
    text = json.dumps({**flow, "provenance": provenance}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def cached_drift(
    flow: dict,
    sessions: Iterable[Session],
    path: Path,
    read: Callable[[Path], Episode],
    decider: str = "habit",
    settings: Settings | None = None,
) -> Outcome:
    """drift(flow, the sessions' episodes, decider, settings), reading and scoring only the
    sessions `path` has no values for under this flow; the cache at `path` then holds exactly
    these sessions' values (a session gone from the list is dropped from it)."""
    settings = settings or Settings()
    settings.check()
    digest = flow_digest(flow)
    kind, known = load(path, digest, decider)
    values: dict[str, Scored] = {}
    scored = 0
    for session in sessions:
        one = known.get(session.key)
        if one is None:
            one, kind = score(flow, read(session.file), decider)
            scored += 1
        values[session.key] = one
    if scored or len(values) != len(known):
        save(path, digest, decider, kind, values)
    result = detect(flow, list(values.values()), kind or decider, settings)
    return Outcome(result, scored, len(values) - scored)


# --- the file ---------------------------------------------------------------------------------


def load(path: Path, digest: str, decider: str) -> tuple[str | None, dict[str, Scored]]:
    """(the decider's kind, key -> values) from the cache, if it is this version's and holds
    this flow's and decider's values; else (None, {})."""
    try:
        data = json.loads(path.read_bytes())
        if (
            data.get("stretto_drift_cache") != VERSION
            or data.get("flow") != digest
            or data.get("decider") != decider
        ):
            return None, {}
        sites = data["sites"]
        if not isinstance(data["kind"], str) or not all(isinstance(s, str) for s in sites):
            return None, {}
        return data["kind"], {key: _scored(entry, sites) for key, entry in data["sessions"].items()}
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None, {}  # no cache, or not one of ours: scored again


def save(path: Path, digest: str, decider: str, kind: str | None, values: dict[str, Scored]):
    from stretto.home import private_dirs
    from stretto.offline.versions import write_atomically

    sites: dict[str, int] = {}
    sessions = {key: _entry(one, sites) for key, one in values.items()}
    data = {
        "stretto_drift_cache": VERSION,
        "flow": digest,
        "decider": decider,
        "kind": kind or decider,
        "sites": list(sites),
        "sessions": sessions,
    }
    private_dirs(path.parent)
    write_atomically(path, json.dumps(data, separators=(",", ":")).encode())


def _entry(one: Scored, sites: dict[str, int]) -> list:
    return [
        one.id,
        one.started_ms,
        one.decisions,
        one.surprise,
        one.disagreement,
        one.steps,
        one.unknown_steps,
        one.unknown_tools,
        [sites.setdefault(s, len(sites)) for s in one.sites],
        [int(h) for h in one.hits],
        one.log_probs,
    ]


def _scored(entry: list, sites: list[str]) -> Scored:
    """An entry back as values; TypeError/ValueError when it is not one this module wrote."""
    ident, started, n, surprise, disagreement, steps, unknown, tools, at, hits, log_probs = entry
    ints = (started, n, steps, unknown, *at, *hits)
    if not isinstance(ident, str) or not all(type(i) is int for i in ints):
        raise TypeError("not a drift cache entry")
    floats = (*(v for v in (surprise, disagreement) if v is not None), *log_probs)
    if not all(type(f) is float for f in floats) or not all(type(t) is str for t in tools):
        raise TypeError("not a drift cache entry")
    if not len(at) == len(hits) == len(log_probs) == n or (surprise is None) != (n == 0):
        raise ValueError("not a drift cache entry")
    if not 0 <= unknown <= steps or min(at, default=0) < 0:
        raise ValueError("not a drift cache entry")
    return Scored(
        id=ident,
        started_ms=started,
        decisions=n,
        surprise=surprise,
        disagreement=disagreement,
        steps=steps,
        unknown_steps=unknown,
        unknown_tools=list(tools),
        sites=[sites[i] for i in at],
        hits=[bool(h) for h in hits],
        log_probs=list(log_probs),
    )
