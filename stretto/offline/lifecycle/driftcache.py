"""Drift's per-session values kept between runs, so that a drift check after an ingest scores
only the sessions it has not scored under the same flow (stretto.offline.lifecycle.drift).

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

from stretto.home import private_dirs
from stretto.offline.lifecycle.drift import (
    Drift,
    Facts,
    Scored,
    Settings,
    detect,
    facts,
    score,
    score_facts,
)
from stretto.offline.lifecycle.versions import write_atomically

if TYPE_CHECKING:
    from stretto.logs.episode import Episode

VERSION = 1  # the file's format and the scoring it holds: bump when either changes
FACTS_VERSION = 2  # the facts file's format and the decision-point rule it holds
# (2: a point's history is what habit.seen keeps of it)


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
    scored: int  # sessions scored in this run (from their facts)
    cached: int  # sessions whose values came from the cache
    read: int = 0  # sessions whose logs were read (the others' facts came from the facts file)


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
    kept = load_facts(facts_path(path))
    values: dict[str, Scored] = {}
    read_now: dict[str, Facts] = {}
    missing: list[tuple[Session, Facts]] = []
    for session in sessions:
        one = known.get(session.key)
        if one is not None:
            values[session.key] = one
            continue
        f = kept.get(session.key)
        if f is None:
            f = read_now[session.key] = facts(read(session.file))
        missing.append((session, f))
    fresh = score_facts(flow, [f for _, f in missing], decider) if missing else None
    if fresh is not None:
        kind = fresh[1]
        for (session, _), one in zip(missing, fresh[0], strict=True):
            values[session.key] = one
    else:  # the arbiter: its judge reads the session's transcript, scored from the log
        for session, _ in missing:
            values[session.key], kind = score(flow, read(session.file), decider)
    if missing or len(values) != len(known):
        save(path, digest, decider, kind, values)
    if read_now or kept.keys() - values.keys():  # the facts file holds these sessions'
        save_facts(
            facts_path(path),
            {k: kept.get(k) or read_now[k] for k in values if k in kept or k in read_now},
        )
    result = detect(flow, list(values.values()), kind or decider, settings)
    return Outcome(result, len(missing), len(values) - len(missing), len(read_now))


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


# --- the facts file: per session, what scoring reads from it whatever the flow ------------


def facts_path(path: Path) -> Path:
    return path.with_name(path.stem + ".facts.json")


def gather_facts(sessions: Iterable[Session], path: Path, read: Callable[[Path], Episode]) -> int:
    """Keep the sessions' facts in the facts file beside the cache at `path`, reading only the
    logs of the sessions it lacks (the file then holds exactly these sessions'): what the check
    does for a domain no flow is served for yet, so that the first check under a flow reads no
    log. The number of logs read."""
    where = facts_path(path)
    kept = load_facts(where)
    held: dict[str, Facts] = {}
    read_now = 0
    for session in sessions:
        f = kept.get(session.key)
        if f is None:
            f, read_now = facts(read(session.file)), read_now + 1
        held[session.key] = f
    if read_now or kept.keys() - held.keys():
        save_facts(where, held)
    return read_now


def load_facts(path: Path) -> dict[str, Facts]:
    """key -> the session's facts, if the file is this version's; else {} (read again)."""
    try:
        data = json.loads(path.read_bytes())
        if data.get("stretto_drift_facts") != FACTS_VERSION:
            return {}
        contexts = [tuple(h) for h in data["contexts"]]
        if not all(isinstance(t, str) for h in contexts for t in h):
            return {}
        return {key: _facts(entry, contexts) for key, entry in data["sessions"].items()}
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return {}


def save_facts(path: Path, sessions: dict[str, Facts]) -> None:
    contexts: dict[tuple[str, ...], int] = {}
    entries = {
        key: [
            f.id,
            f.started_ms,
            [[contexts.setdefault(h, len(contexts)), c, int(e), s] for h, c, e, s in f.points],
            f.tools,
        ]
        for key, f in sessions.items()
    }
    data = {"stretto_drift_facts": FACTS_VERSION, "contexts": list(contexts), "sessions": entries}
    private_dirs(path.parent)
    write_atomically(path, json.dumps(data, separators=(",", ":")).encode())


def _facts(entry: list, contexts: list[tuple[str, ...]]) -> Facts:
    ident, started, points, tools = entry
    if not isinstance(ident, str) or type(started) is not int:
        raise TypeError("not a drift facts entry")
    out = []
    for at, call, failed, step in points:
        if type(at) is not int or at < 0 or not isinstance(call, str) or failed not in (0, 1):
            raise TypeError("not a drift facts entry")
        if step is not None and not isinstance(step, str):
            raise TypeError("not a drift facts entry")
        out.append((contexts[at], call, bool(failed), step))
    if not all(isinstance(t, str) for t in tools):
        raise TypeError("not a drift facts entry")
    return Facts(ident, started, out, list(tools))
