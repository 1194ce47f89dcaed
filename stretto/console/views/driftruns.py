"""A flow's drift series, computed in the background: the API answers at once with the
series when it is known, else with how far its computation has come (it starts it), or with
"too large" when the domain's sessions hold more calls than the console's limit
(`--drift-max-calls`).

A computation reads its sessions one by one, takes each one's facts (its decision points), then
scores them and runs the detector (stretto.offline.lifecycle.drift, linear in the calls).
Between sessions it looks whether it should stop: the console is shutting down, or one of its
sessions changed or went away (trashed) — the next request starts it again on the sessions then
present. One computation runs at a time (one core at most); the others wait their turn.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from stretto.console import adapter
from stretto.console.views.catalog import Catalog, FlowEntry, SessionEntry, stamp_of

DRIFT_MAX_CALLS = 500_000  # the default limit: the domain's sessions' calls, all together
DRIFTS_KEPT = 64
CHECK_EVERY_S = 0.5  # how often a computation looks whether its sessions changed


class Stopped(Exception):
    """The computation was cancelled (its sessions changed, or the console stops)."""


@dataclass
class Run:
    """One computation: its key (the flow's version and its sessions' versions), where it
    is, and how it ended."""

    key: tuple
    sessions: list[SessionEntry]
    cancelled: threading.Event = field(default_factory=threading.Event)
    step: str = "waiting for another drift computation to end"
    done: int = 0
    total: int = 0
    error: str | None = None

    def progress(self) -> dict:
        return {"state": "computing", "step": self.step, "done": self.done, "total": self.total}


class Drifts:
    """Drift per (flow version, sessions), computed once in the background and kept."""

    def __init__(self, catalog: Catalog, max_calls: int = DRIFT_MAX_CALLS) -> None:
        self.catalog = catalog
        self.max_calls = max_calls
        self.lock = threading.Lock()
        self.turn = threading.Lock()  # one computation at a time
        self.kept: OrderedDict[tuple, dict] = OrderedDict()
        self.runs: dict[str, Run] = {}  # the flow's name -> its computation under way
        self.stopping = threading.Event()

    def series(self, entry: FlowEntry) -> dict:
        """`{"state": "done", …the series}`, `{"state": "computing", step, done, total}` (and
        the computation started if none is under way for these sessions), `{"state":
        "too_large", …}` or `{"state": "failed", "error": …}`."""
        flow = entry.flow
        assert flow is not None
        domain = flow["manifest"]["domain"]
        chosen = self.catalog.readable_sessions(domain)
        calls = sum(e.summary.get("calls") or 0 for e in chosen)
        if calls > self.max_calls:
            return {
                "state": "too_large",
                "sessions": len(chosen),
                "calls": calls,
                "limit": self.max_calls,
                "error": f"the {len(chosen)} {domain} sessions hold {calls:,} calls, more than "
                f"the console's limit of {self.max_calls:,} (stretto-console --drift-max-calls); "
                "run `stretto drift` on them instead",
            }
        key = (entry.name, entry.modified_unix_ms, tuple((e.rel, stamp_of(e.path)) for e in chosen))
        with self.lock:
            known = self.kept.get(key)
            if known is not None:
                return known
            run = self.runs.get(entry.name)
            if run is not None and run.key != key:  # its sessions changed since it started
                run.cancelled.set()
                run = None
            if run is not None and run.error is not None:
                del self.runs[entry.name]
                return {"state": "failed", "error": run.error}
            if run is None:
                run = Run(key, chosen, total=len(chosen))
                self.runs[entry.name] = run
                threading.Thread(
                    target=self._compute,
                    args=(entry.name, flow, domain, run),
                    daemon=True,
                    name=f"drift {entry.name}",
                ).start()
            return run.progress()

    def cancel_stale(self) -> None:
        """Cancel the computations one of whose sessions changed or went away (called when
        the console changes the data directory; the computations also look themselves)."""
        with self.lock:
            runs = list(self.runs.values())
        for run in runs:
            if _changed(run):
                run.cancelled.set()

    def stop(self) -> None:
        """Cancel every computation (the console is shutting down)."""
        self.stopping.set()
        with self.lock:
            for run in self.runs.values():
                run.cancelled.set()

    def _compute(self, name: str, flow: dict, domain: str, run: Run) -> None:
        try:
            with self.turn:
                result = self._series(flow, run)
            result["sessions_read"] = f"every readable {domain} session ({len(run.sessions)})"
            result["state"] = "done"
            with self.lock:
                self.kept[run.key] = result
                while len(self.kept) > DRIFTS_KEPT:
                    self.kept.popitem(last=False)
        except Stopped:
            pass
        except Exception as exc:  # noqa: BLE001 - said on the page, not a crash of the console
            run.error = self.catalog.shown(f"{type(exc).__name__}: {exc}")
        finally:
            with self.lock:
                if self.runs.get(name) is run and run.error is None:
                    del self.runs[name]

    def _series(self, flow: dict, run: Run) -> dict:
        checked = time.monotonic()

        def going_on() -> None:
            nonlocal checked
            if run.cancelled.is_set() or self.stopping.is_set():
                raise Stopped
            if time.monotonic() - checked >= CHECK_EVERY_S:
                checked = time.monotonic()
                if _changed(run):
                    raise Stopped

        episodes = []
        run.step, run.done = "reading the sessions", 0
        for session in run.sessions:
            going_on()
            episodes.append(self.catalog.episode(session.path))
            run.done += 1
        facts = []
        run.step, run.done = "finding the decision points", 0
        for episode in episodes:
            going_on()
            facts.append(adapter.drift_facts(episode))
            run.done += 1
        going_on()
        run.step = "scoring the decisions and looking for changes"
        return adapter.drift_from_facts(flow, facts, episodes)


def _changed(run: Run) -> bool:
    """Whether one of the run's sessions changed or went away since it started."""
    return any(
        stamp_of(s.path) != stamp for s, (_, stamp) in zip(run.sessions, run.key[2], strict=True)
    )
