"""`stretto stage`: relearn a flow beside the one served, and show what committing it would
change (../shared/spec/algorithms.md §17).

The staged flow `<name>.staged.flow.json` is learned from every session as `learn
--habit-only` learns (the caller's `learn`: episodes -> flow), keeping the committed flow's
promotion and thresholds, and relearning its surprise gate at the same quantile and window.
Each session new since the last run (of the last `window`) is first scored, out of sample for
both, by the committed flow and by the staged flow as it was before that session (learned from
the sessions before it), as `promote` scores: at each of the agent's results the flow decides
as served; a lookup is **used** when the agent made that call itself in a later LLM turn, a
**detour** when not, and **served** when the proxy had already made it in that session (the
agent had no reason to repeat it: neither used nor detour). The scores are kept in
`<name>.stage.json`, so a session is scored once.

The report, over the last `window` sessions: per site and in total, lookups, used (with the
90% Wilson interval of the used share), detours and served for each flow, counting the sites
where each flow acts (its promoted sites, when it has a promotion record); the per-session
difference in used − detours (staged − committed) with its 90% interval; and the flow-diff of
committing. Committing stays a person's decision, unless `--auto-commit-if-better`: commit
when that interval lies above zero.

A relearned flow (the pipeline's `flow` asset) is put in place by `place_relearned`: written
as the staged flow, served only when it validates and nothing in it needs review, else left
staged for a person (`stretto flow-commit`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stretto.home import private_dirs
from stretto.logs.episode import Assistant, Episode, ToolResult, in_start_order
from stretto.model.binding import same_arguments, value_text
from stretto.model.flow import FlowError, dumps, load_flow, write_flow
from stretto.offline.fits.gate import learn_gate
from stretto.offline.lifecycle import versions
from stretto.offline.lifecycle.flowdiff import diff, diff_markdown
from stretto.offline.lifecycle.promote import Z, acts_at, score, wilson_lower
from stretto.offline.lifecycle.versions import digest, staged_path, write_atomically

Learner = Callable[[list[Episode]], dict]
KEPT = ("promoted", "thresholds")  # what the staged flow keeps of the committed one
TALLY = ("decisions", "lookups", "used", "detours", "served")


def state_path(flow_path: str | Path) -> Path:
    flow_path = Path(flow_path)
    name = flow_path.name
    name = name[: -len(".flow.json")] if name.endswith(".flow.json") else name
    return flow_path.with_name(f"{name}.stage.json")


def _proxied(episode: Episode) -> dict[str, list]:
    """The proxy's lookups after each of the agent's results: the agent call's id -> calls."""
    out: dict[str, list] = {}
    after = None
    for event in episode.events:
        if isinstance(event, ToolResult) and not event.by_proxy:
            after = event.call_id
        elif isinstance(event, Assistant) and after is not None:
            out.setdefault(after, []).extend(c for c in event.calls if c.by_proxy)
    return out


def score_session(flow: dict, episode: Episode) -> dict[str, dict]:
    """Per site: decisions, lookups, used, detours, served (as `promote` scores, every site
    scored; where the flow acts is counted later)."""
    scored = score(flow, [episode], keep_decisions=True)
    proxied = _proxied(episode)
    sites: dict[str, dict] = {}
    for d in scored.decisions or []:
        tally = sites.setdefault(d["site"], dict.fromkeys(TALLY, 0))
        tally["decisions"] += 1
        if d["tool"] is None:
            continue
        tally["lookups"] += 1
        if d["used"]:
            tally["used"] += 1
            continue
        bound = {arg: value_text(v) for arg, v in (d["arguments"] or {}).items()}
        made = proxied.get(d["after"], [])
        if any(c.name == d["tool"] and same_arguments(bound, c.arguments) for c in made):
            tally["served"] += 1
        else:
            tally["detours"] += 1
    return dict(sorted(sites.items()))


def keep_committed(committed: dict, learned: dict) -> dict:
    """A learned flow with the committed flow's promotion and thresholds."""
    out = dict(learned)
    for key in KEPT:
        out.pop(key, None)
        if key in committed:
            out[key] = committed[key]
    return out


def session_value(flow: dict, sites: dict[str, dict]) -> int:
    """used − detours over the sites where the flow acts."""
    return sum(t["used"] - t["detours"] for s, t in sites.items() if acts_at(flow, s))


@dataclass
class Stage:
    staged: dict
    staged_path: Path
    committed: dict
    rows: list[dict]  # the scored sessions of the window, in start order
    scored_now: int  # sessions scored in this run
    review: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    def sites(self) -> list[dict]:
        names = sorted({s for r in self.rows for part in ("committed", "staged") for s in r[part]})
        out = []
        for site in names:
            row: dict = {"site": site}
            for part, flow in (("committed", self.committed), ("staged", self.staged)):
                tally: dict = dict.fromkeys(TALLY, 0)
                for r in self.rows:
                    for key in TALLY:
                        tally[key] += r[part].get(site, {}).get(key, 0)
                tally["acts"] = acts_at(flow, site)
                tally["interval"] = interval(tally["used"], tally["lookups"])
                row[part] = tally
            out.append(row)
        return out

    def totals(self) -> dict:
        """Per flow the sums over the sites where it acts; the per-session difference in
        used − detours, its mean and 90% interval; `better` when that interval is above 0."""
        out: dict = {"sessions": len(self.rows)}
        for part, flow in (("committed", self.committed), ("staged", self.staged)):
            tally: dict = dict.fromkeys(TALLY, 0)
            for r in self.rows:
                for site, t in r[part].items():
                    if acts_at(flow, site):
                        for key in TALLY:
                            tally[key] += t[key]
            tally["interval"] = interval(tally["used"], tally["lookups"])
            out[part] = tally
        diffs = [
            session_value(self.staged, r["staged"]) - session_value(self.committed, r["committed"])
            for r in self.rows
        ]
        n = len(diffs)
        mean = sum(diffs) / n if n else 0.0
        half = None
        if n >= 2:
            sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
            half = Z * sd / math.sqrt(n)
        out["difference"] = {
            "mean": mean,
            "total": sum(diffs),
            "interval": [mean - half, mean + half] if half is not None else None,
        }
        # an interval of zero width (every session the same) above zero counts too
        out["better"] = half is not None and mean - half > 0
        return out

    def as_json(self) -> dict:
        return {
            "staged": str(self.staged_path),
            "sessions_scored_now": self.scored_now,
            "totals": self.totals(),
            "sites": self.sites(),
            "review": self.review,
            "other": self.other,
        }


def interval(k: int, n: int) -> list[float] | None:
    """The 90% Wilson interval of k of n (None when n = 0)."""
    if n <= 0:
        return None
    return [wilson_lower(k, n), 1.0 - wilson_lower(n - k, n)]


def write_state(flow_path: Path, state: dict) -> None:
    """The stage's state beside the flow, written whole (read_state reads it)."""
    text = json.dumps(state, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    write_atomically(state_path(flow_path), text.encode())


def read_state(flow_path: Path) -> dict:
    path = state_path(flow_path)
    if not path.exists():
        return {"sessions": {}}
    try:
        state = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc}); remove it to score again") from None
    if not isinstance(state, dict) or not isinstance(state.get("sessions"), dict):
        raise ValueError(f"{path}: field `sessions`: expected an object (remove it to score again)")
    return state


def stage(
    flow_path: str | Path,
    episodes: Sequence[Episode],
    learn: Learner,
    *,
    window: int = 50,
    settings: dict | None = None,
    now_ms: int | None = None,
) -> Stage:
    """Stage the flow at `flow_path` from `episodes` (taken in start order); write the staged flow
    and the scores. `settings` (e.g. the half-life the learner uses) are kept in the state
    file."""
    flow_path = Path(flow_path)
    if window < 1:
        raise ValueError(f"--window wants at least 1 session, got {window}")
    committed = load_flow(flow_path)
    episodes = in_start_order(episodes)
    if not episodes:
        raise ValueError("no sessions to stage from")
    if len({e.id for e in episodes}) != len(episodes):
        raise ValueError("two sessions share an id; each session is scored once, by its id")
    state = read_state(flow_path)
    version = digest(dumps(committed).encode())
    first_new = max(0, len(episodes) - window)
    scored_now = 0
    for k in range(first_new, len(episodes)):
        episode = episodes[k]
        if episode.id in state["sessions"]:
            continue
        before = keep_committed(committed, learn(episodes[:k])) if k else committed
        state["sessions"][episode.id] = {
            "committed": score_session(committed, episode),
            "staged": score_session(before, episode),
            "committed_version": version,
            "staged_from": k,
        }
        scored_now += 1
    staged = keep_committed(committed, learn(episodes))
    gate = committed.get("surprise")
    if gate and "quantile" in gate:
        staged["surprise"] = learn_gate(episodes, learn, gate["quantile"], gate["window"])
    elif gate:
        staged["surprise"] = gate
    target = staged_path(flow_path)
    write_flow(staged, target)
    state.pop("staged_by", None)  # staged here, not by another writer (mark_staged)
    state.update(
        flow=flow_path.name,
        staged=target.name,
        settings={"window": window, **(settings or {})},
        updated_unix_ms=int(time.time() * 1000) if now_ms is None else now_ms,
    )
    write_state(flow_path, state)
    rows = [
        {"id": e.id, **state["sessions"][e.id]}
        for e in episodes[first_new:]
        if e.id in state["sessions"]
    ]
    review, other = diff(committed, staged)
    return Stage(staged, target, committed, rows, scored_now, review, other)


def mark_staged(flow_path: str | Path, by: str, now_ms: int | None = None) -> None:
    """Record that another writer (the pipeline's relearn, when its change needs review) put
    the staged flow beside the flow, so that its report is found (last_report): the sessions
    scored before are kept, none is scored (`stretto stage` scores them)."""
    flow_path = Path(flow_path)
    state = read_state(flow_path)
    state.setdefault("settings", {"window": 50})
    state.update(
        flow=flow_path.name,
        staged=staged_path(flow_path).name,
        staged_by=by,
        updated_unix_ms=int(time.time() * 1000) if now_ms is None else now_ms,
    )
    write_state(flow_path, state)


def last_report(flow_path: str | Path) -> Stage | None:
    """The report of the last `stage` run, read back from the staged flow and the scores
    (None when nothing is staged now: never, or committed since)."""
    flow_path = Path(flow_path)
    target = staged_path(flow_path)
    if not target.exists() or not state_path(flow_path).exists():
        return None
    state = read_state(flow_path)
    window = state.get("settings", {}).get("window", 50)
    scored = sorted(state["sessions"].items(), key=lambda kv: (kv[1]["staged_from"], kv[0]))
    rows = [{"id": session, **scores} for session, scores in scored[-window:]]
    committed, staged = load_flow(flow_path), load_flow(target)
    review, other = diff(committed, staged)
    return Stage(staged, target, committed, rows, 0, review, other)


def _share(t: dict) -> str:
    if not t["lookups"]:
        return "0"
    low, high = t["interval"]
    return f"{t['used']} ({t['used'] / t['lookups']:.0%}, 90%: {low:.0%}–{high:.0%})"


def markdown(result: Stage) -> str:
    totals = result.totals()
    d = totals["difference"]
    out = [
        f"# Staged flow: {result.committed['manifest']['domain']}",
        "",
        f"Scored on the last {totals['sessions']} sessions ({result.scored_now} new in this run), "
        "each out of sample: by the committed flow, and by the staged flow as it was before "
        "that session. Written: " + str(result.staged_path) + ".",
        "",
        "| Flow | Lookups | Used | Detours | Served |",
        "|---|---|---|---|---|",
    ]
    for part in ("committed", "staged"):
        t = totals[part]
        out.append(f"| {part} | {t['lookups']} | {_share(t)} | {t['detours']} | {t['served']} |")
    if d["interval"] is None:
        verdict = "too few sessions for an interval"
    else:
        low, high = d["interval"]
        verdict = f"90% interval {low:+.2f} to {high:+.2f}"
    out += [
        "",
        f"Used − detours per session, staged − committed: {d['mean']:+.2f} ({verdict}); "
        + (
            "**the staged flow is better**."
            if totals["better"]
            else "not shown better: keep the committed flow unless the diff says otherwise."
        ),
        "",
        "## Sites",
        "",
        "| After | Committed: lookups | used | detours | Staged: lookups | used | detours |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result.sites():
        c, s = row["committed"], row["staged"]
        mark = {True: "", False: " (does not act)"}
        out.append(
            f"| {row['site']} | {c['lookups']}{mark[c['acts']]} | {_share(c)} | {c['detours']} "
            f"| {s['lookups']}{mark[s['acts']]} | {_share(s)} | {s['detours']} |"
        )
    out += ["", "## Committing would change", ""]
    out.append(diff_markdown(result.review, result.other).split("\n", 1)[-1].strip() or "Nothing.")
    return "\n".join(out) + "\n"


def commit_if_better(flow_path: str | Path, result: Stage, note: str | None = None) -> dict | None:
    """`--auto-commit-if-better`: commit the staged flow when used − detours per session
    improved with its 90% interval above zero; the new version's entry, else None."""
    totals = result.totals()
    if not totals["better"]:
        return None
    d = totals["difference"]
    low, high = d["interval"]
    note = note or (
        f"auto-commit: used − detours per session {d['mean']:+.2f} "
        f"(90% interval {low:+.2f} to {high:+.2f}) over {totals['sessions']} sessions"
    )
    return versions.commit(flow_path, note, source=result.staged_path, comparison=totals)


@dataclass
class Placed:
    """Where a relearned flow went (place_relearned), and the two checks that decided it."""

    path: Path  # its place: the served flow, or the file asked for instead
    candidate: Path  # where it was written first: the staged flow when serving, else `path`
    serving: bool  # `path` is the served flow (else nothing served changes)
    valid: bool  # it passes its schema and the loader's checks
    why_valid: str
    review: list[str]  # what it can do that the served flow could not (diff)
    other: list[str]
    why: str  # the diff against the served flow, said
    notes: list[str] = field(default_factory=list)  # warnings for the run's log

    @property
    def staged(self) -> bool:
        """Left staged beside the served flow, for review: it does not validate, or needs
        review."""
        return self.serving and not (self.valid and not self.review)


def place_relearned(learned: dict, served: Path, out: Path | None, note: str) -> Placed:
    """Put the relearned flow in place: written as a candidate beside the `served` flow, which
    it replaces (serve, `note` and the diff's verdict in the version log) only when it
    validates and nothing needs review; else it stays staged, marked so. With another `out`,
    nothing served changes: written there."""
    path = out or served
    serving = path.absolute() == served.absolute()
    candidate = staged_path(served) if serving else path
    before = _readable(served)
    private_dirs(candidate.parent, own=candidate.parent == served.parent)  # HOME/flows/ is ours
    write_flow(learned, candidate)
    try:
        load_flow(candidate)  # (it validates)
        valid, why_valid = True, "the flow file validates"
    except (FlowError, OSError, ValueError) as exc:
        valid, why_valid = False, str(exc)
    review: list[str] = []
    other: list[str] = []
    if before is None:
        why = f"no flow was served at {served} before"
    else:
        review, other = diff(before, learned)
        why = ("needs review: " + "; ".join(review)) if review else "nothing needs review"
    placed = Placed(path, candidate, serving, valid, why_valid, review, other, why)
    if placed.staged:
        try:
            mark_staged(served, by="relearn")
        except ValueError as exc:  # its scores file cannot be read: say so, the flow is staged
            placed.notes.append(str(exc))
    elif serving:
        serve(candidate, served, f"{note}: {why}")
    return placed


def serve(candidate: Path, served: Path, note: str) -> None:
    """The candidate becomes the served flow, replaced whole (nothing is staged beside it
    after): committed as the next version when the served flow has a history (`stretto
    flow-commit`), else renamed over it."""
    current = versions.current(served)
    if current is not None:
        if current["sha256"] != versions.digest(candidate.read_bytes()):
            versions.commit(served, note, source=candidate)  # (another writer: VersionError)
        candidate.unlink(missing_ok=True)
    else:
        candidate.replace(served)


def _readable(path: Path) -> dict | None:
    try:
        return load_flow(path)
    except (OSError, ValueError):
        return None
