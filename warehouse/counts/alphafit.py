"""The fit of α (stretto.model.habit.fit_alpha), kept so that a relearn walks only steps it has
not walked before.

The fit reads the first ALPHA_FIT_STEPS steps in learning order (whole sessions), each with
what an online learner had seen before it (warehouse/sql/counts.sql, `prequential`). It is not
a sum over parts, but it is a walk: a step's counts depend only on the steps before it. So the
walk is kept, beside the first part's counts:

    warehouse/counts/<domain>/<day>/<first part's sessions>.alpha.json
        the sessions walked (id and ingest run, in learning order), the counts n(c, a) over
        their steps, the session that did not fit (if the walk reached the limit), the
        arrays' file, and the fits made from them (by vocabulary size)
    warehouse/counts/<domain>/<day>/<first part's sessions>.alpha-<walk>.npz   the arrays

A relearn whose first sessions are the walk's sessions, in the same order, continues the walk
from its counts over the sessions after them (none when the walk reached the limit and the
next session is the one that did not fit: then not even the arrays are read when a fit of the
same vocabulary is kept); any other plan — an earlier day changed, a session came in before
the walk's last — walks from the start. The arrays are in learning order either way, so the
fit is the one a walk from the start gives, bit for bit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from stretto.model.habit import fit_alpha
from warehouse.counts.daycounts import PartCounts, PartStore, digest
from warehouse.counts.partcount import ALPHA_FIT_STEPS, STEPS_OF_WANTED, Plan, set_wanted
from warehouse.files import write_atomic
from warehouse.sql import statements as sql_statements

ALPHA_VERSION = 1  # bump when the walk's arrays change meaning
COLUMNS = ("n0", "na0", "n1", "na1", "n2", "na2")
EVERY_SESSION = 2**62  # a walk's bound past any session order: no session stops it
Identity = list  # [session, ingest run]


@dataclass
class Walk:
    """The walk so far: its sessions, n(c, a) over their steps ([level, h2, h1, action, n]),
    the session that did not fit, the arrays (None until read) and the fits made of them."""

    sessions: list[Identity] = field(default_factory=list)
    seen: list[list] = field(default_factory=list)
    steps: int = 0
    stopped_at: Identity | None = None
    arrays: dict[str, np.ndarray] | None = None
    fits: dict[str, dict] = field(default_factory=dict)

    def name(self) -> str:
        return digest([ALPHA_VERSION, self.sessions])


def fitted_alpha(
    con,
    layout,
    plan: Plan,
    parts: Mapping[str, PartCounts],
    kinds,
    vocabulary: int,
    say: Callable[[str], None] = lambda message: None,
    max_steps: int = ALPHA_FIT_STEPS,
) -> tuple[dict, Walk]:
    """The fit of α over the plan's first steps for this vocabulary size, and the walk it
    was made from: the kept walk continued over what it lacks (on the open connection), or
    walked from the start; kept again when it changed."""
    folder, key = _place(layout, plan)
    candidates = _candidates(plan, parts, max_steps)
    walk = _load(folder, key, candidates) or Walk()
    changed = False
    more = candidates[len(walk.sessions) :]
    if more and more[0] != walk.stopped_at:  # (the session that did not fit: still not)
        if not _read_arrays(folder, key, walk):  # the kept arrays are lost: from the start
            walk = _empty()
        say(
            f"fitting α: walking up to {len(candidates) - len(walk.sessions)} sessions after "
            f"the {len(walk.sessions)} walked before"
        )
        walk = _walk_on(con, plan, kinds, walk, candidates, max_steps)
        changed = True
    fitted = walk.fits.get(str(vocabulary))
    if fitted is None:
        if not _read_arrays(folder, key, walk):
            say(f"fitting α: walking up to {len(candidates)} sessions after the 0 walked before")
            walk = _walk_on(con, plan, kinds, _empty(), candidates, max_steps)
        assert walk.arrays is not None
        fitted = fit_alpha({c: walk.arrays[c].astype(np.float64) for c in COLUMNS}, vocabulary)
        walk.fits[str(vocabulary)] = fitted
        changed = True
    if changed:
        _save(folder, key, walk)
    return fitted, walk


def _empty() -> Walk:
    return Walk(arrays={c: np.zeros(0, np.int64) for c in COLUMNS})


def _load(folder: Path, key: str, candidates: list[Identity]) -> Walk | None:
    """The kept walk (its arrays not read yet), if its sessions are the plan's first ones,
    in order."""
    try:
        data = json.loads((folder / f"{key}.alpha.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != ALPHA_VERSION:
        return None
    walk = Walk(
        data["sessions"], data["seen"], data["steps"], data["stopped_at"], None, data["fits"]
    )
    if candidates[: len(walk.sessions)] != walk.sessions:
        return None
    return walk


def _read_arrays(folder: Path, key: str, walk: Walk) -> bool:
    """Read the walk's arrays if they are not yet: whether it has them."""
    if walk.arrays is not None:
        return True
    if not walk.sessions:
        walk.arrays = _empty().arrays
        return True
    try:
        with np.load(folder / f"{key}.alpha-{walk.name()}.npz") as stored:
            walk.arrays = {c: stored[f"arr_{i}"] for i, c in enumerate(COLUMNS)}
    except (OSError, ValueError, KeyError):
        return False
    return True


def _save(folder: Path, key: str, walk: Walk) -> None:
    assert walk.arrays is not None
    npz = folder / f"{key}.alpha-{walk.name()}.npz"
    if walk.sessions and not npz.exists():
        arrays = walk.arrays
        write_atomic(npz, lambda temp: _write_npz(temp, arrays))
    record = {
        "version": ALPHA_VERSION,
        "sessions": walk.sessions,
        "seen": walk.seen,
        "steps": walk.steps,
        "stopped_at": walk.stopped_at,
        "fits": walk.fits,
    }
    text = json.dumps(record, separators=(",", ":"))
    write_atomic(folder / f"{key}.alpha.json", lambda temp: _write_text(temp, text))
    for old in folder.glob("*.alpha*"):
        if old.name not in (f"{key}.alpha.json", npz.name) and not old.name.startswith("."):
            old.unlink(missing_ok=True)


def _write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    with path.open("wb") as out:
        np.savez(out, *[arrays[c] for c in COLUMNS])


def _write_text(path: Path, text: str) -> None:
    path.write_text(text)


def _place(layout, plan: Plan) -> tuple[Path, str]:
    """Where the plan's walk is kept: beside its first part's counts."""
    first = plan.parts[0]
    return PartStore(layout).folder(first), plan.keys[first]


def _candidates(plan: Plan, parts: Mapping[str, PartCounts], max_steps: int) -> list[Identity]:
    """The sessions the walk may reach, in learning order: those of every day until the steps
    seen pass the limit (from the parts' step counts), each as [session, ingest run]."""
    by_day: dict[str, int] = {}
    for part in plan.parts:
        by_day[plan.days[part]] = by_day.get(plan.days[part], 0) + parts[part].steps
    early, seen = set(), 0
    for day in sorted(by_day):
        if seen > max_steps:
            break
        early.add(day)
        seen += by_day[day]
    return [
        [row[0], ingest]
        for row, ingest in zip(plan.rows, plan.ingests, strict=True)
        if plan.days[row[2]] in early
    ]


def _walk_on(
    con, plan: Plan, kinds, walk: Walk, candidates: list[Identity], max_steps: int
) -> Walk:
    """The walk continued over the candidates after its sessions."""
    done = len(walk.sessions)
    by_id = {(row[0], ingest): row for row, ingest in zip(plan.rows, plan.ingests, strict=True)}
    rows = [by_id[(s, i)] for s, i in candidates[done:]]
    set_wanted(con, rows, plan.merged, ["steps"])
    con.execute(f"CREATE OR REPLACE TEMP VIEW learn_steps AS {STEPS_OF_WANTED}")
    con.execute("CREATE OR REPLACE TEMP TABLE kinds (tool VARCHAR, kind VARCHAR)")
    if kinds:
        con.executemany("INSERT INTO kinds VALUES (?, ?)", sorted(kinds.items()))
    con.execute(dict(sql_statements("counts"))["histories"])
    assert walk.arrays is not None
    table, seen, stopped = walked_histories(con, walk.steps, walk.seen, max_steps)
    arrays = {c: np.concatenate([walk.arrays[c], table[c]]) for c in COLUMNS}
    # the whole sessions before the one that did not fit, or every candidate
    upto = next((i for i, r in enumerate(rows) if r[1] == stopped), len(rows))
    return Walk(
        sessions=walk.sessions + candidates[done : done + upto],
        seen=seen,
        steps=walk.steps + len(table["n0"]),
        stopped_at=candidates[done + upto] if upto < len(rows) else None,
        arrays=arrays,
        fits={},
    )


def walked_histories(
    con,
    prior_steps: int = 0,
    prior: list[list] | None = None,
    max_steps: int = ALPHA_FIT_STEPS,
) -> tuple[dict[str, np.ndarray], list[list], int | None]:
    """The walk over the sessions of the `histories` table on the connection, after
    `prior_steps` steps whose n(c, a) are `prior` ([level, h2, h1, action, n]; none: from the
    start): its arrays (counts.sql `prequential`, in learning order), n(c, a) over every step
    walked so far, and the session order of the first session that did not fit (None when
    all did)."""
    queries = dict(sql_statements("counts"))
    stop = con.execute(
        queries["prequential_stop"], {"max_steps": max_steps, "prior_steps": prior_steps}
    ).fetchall()
    stopped = stop[0][0] if stop else None
    con.execute(
        queries["prequential_steps"], {"before": EVERY_SESSION if stopped is None else stopped}
    )
    before = prior or []
    prior_table = pa.table(
        {
            "level": pa.array([r[0] for r in before], pa.int32()),
            "h2": pa.array([r[1] for r in before], pa.string()),
            "h1": pa.array([r[2] for r in before], pa.string()),
            "action": pa.array([r[3] for r in before], pa.string()),
            "n": pa.array([r[4] for r in before], pa.int64()),
        }
    )
    con.register("prior", prior_table)
    try:
        table = con.execute(queries["prequential"]).fetchnumpy()
    finally:
        con.unregister("prior")
    arrays = _with_walk(table, prior_steps)
    seen = {(lv, h2, h1, a): n for lv, h2, h1, a, n in before}
    for lv, h2, h1, a, n in con.execute(queries["prequential_seen"]).fetchall():
        seen[(lv, h2, h1, a)] = seen.get((lv, h2, h1, a), 0) + int(n)
    ordered = sorted(seen.items(), key=lambda i: tuple("" if x is None else str(x) for x in i[0]))
    return arrays, [[*k, n] for k, n in ordered], stopped


def _with_walk(table: Mapping[str, np.ndarray], prior_steps: int) -> dict[str, np.ndarray]:
    """The walk's arrays: each step's counts before this walk (`table`, in learning order)
    plus those over this walk's earlier steps, which at each level are how many earlier steps
    share its context (and its action)."""
    action, h1, h2 = (np.asarray(table[k], np.int64) for k in ("action_key", "h1_key", "h2_key"))
    width = int(max(k.max(initial=0) for k in (action, h1, h2))) + 1
    context2 = h2 * width + h1
    earlier = {
        "na0": action,
        "n1": h1,
        "na1": h1 * width + action,
        "n2": context2,
        "na2": context2 * width + action,
    }
    arrays = {"n0": prior_steps + np.asarray(table["g"], np.int64) - 1}
    for column, keys in earlier.items():
        arrays[column] = np.asarray(table[column], np.int64) + _earlier_alike(keys)
    return {c: arrays[c] for c in COLUMNS}


def _earlier_alike(keys: np.ndarray) -> np.ndarray:
    """For each element, how many elements before it are equal to it."""
    order = np.argsort(keys, kind="stable")
    ranked = keys[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    first = np.repeat(starts, np.diff(np.r_[starts, len(keys)]))
    out = np.empty(len(keys), np.int64)
    out[order] = np.arange(len(keys)) - first
    return out
