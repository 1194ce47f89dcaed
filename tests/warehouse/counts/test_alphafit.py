"""The fit of α is a walk over the first steps in learning order: a walk kept and continued
over later sessions is the walk from the start, and a walk that reached its limit is not
walked again when a later day comes in (warehouse/counts/alphafit.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from tests.warehouse.helpers import SHOP, ingest, put_log
from warehouse import store
from warehouse.counts.alphafit import COLUMNS, Walk, fitted_alpha
from warehouse.counts.daycounts import PartStore
from warehouse.counts.learn import learned_units
from warehouse.counts.partcount import counted_parts, listing
from warehouse.layout import Layout

VOCABULARY = 12


def walked(
    home: Path, max_steps: int, said: list[str], vocabulary: int = VOCABULARY
) -> tuple[dict, Walk]:
    """The fit and the walk of the shop plan, as learning makes them, with this limit."""
    layout = Layout.at(home)
    con = store.open_catalogue(layout)
    try:
        plan = learned_units(con, layout, "shop", None, None, said.append)
        kinds, _, _ = listing(con, layout, plan)
        parts = counted_parts(con, layout, plan, kinds, False, None, said.append)
        return fitted_alpha(con, layout, plan, parts, kinds, vocabulary, said.append, max_steps)
    finally:
        con.close()


def from_start(home: Path, max_steps: int) -> tuple[dict, Walk]:
    """The same with no walk kept."""
    for kept in PartStore(Layout.at(home)).root.rglob("*.alpha*"):
        kept.unlink()
    said: list[str] = []
    fitted, walk = walked(home, max_steps, said)
    assert any(s.endswith("after the 0 walked before") for s in said)
    return fitted, walk


def same_walk(one: Walk, other: Walk) -> bool:
    assert one.arrays is not None and other.arrays is not None
    return (
        one.sessions == other.sessions
        and one.steps == other.steps
        and one.stopped_at == other.stopped_at
        and all(np.array_equal(one.arrays[c], other.arrays[c]) for c in COLUMNS)
    )


def test_a_walk_goes_on_over_a_new_day_as_a_walk_from_the_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for i, log in enumerate(SHOP[:4]):
        put_log(log, home / "logs/shop", i % 2)
    ingest(home)
    unlimited = 10**9
    said: list[str] = []
    walked(home, unlimited, said)
    for log in SHOP[4:]:
        put_log(log, home / "logs/shop", 2)
    ingest(home)
    said.clear()
    fitted, walk = walked(home, unlimited, said)
    assert "fitting α: walking up to 2 sessions after the 4 walked before" in said
    assert len(walk.sessions) == 6 and walk.stopped_at is None
    again, fresh = from_start(home, unlimited)
    assert same_walk(walk, fresh) and fitted == again
    # nothing new: the fit is read back, the arrays not even read
    said.clear()
    fitted, walk = walked(home, unlimited, said)
    assert not [s for s in said if s.startswith("fitting")]
    assert walk.arrays is None and fitted == again
    shutil.rmtree(tmp_path)


def test_a_walk_that_reached_its_limit_is_not_walked_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for i, log in enumerate(SHOP[:4]):
        put_log(log, home / "logs/shop", i % 2)
    ingest(home)
    _, whole = from_start(home, 10**9)
    limit = whole.steps - 1  # the fourth session no longer fits
    said: list[str] = []
    fitted, walk = from_start(home, limit)
    assert len(walk.sessions) == 3 and walk.stopped_at == whole.sessions[3]
    for log in SHOP[4:]:
        put_log(log, home / "logs/shop", 2)
    ingest(home)
    said.clear()
    later, kept = walked(home, limit, said)
    assert not [s for s in said if s.startswith("fitting")]
    assert later == fitted
    again, fresh = from_start(home, limit)
    assert again == later and fresh.sessions == walk.sessions and fresh.steps == walk.steps
    shutil.rmtree(tmp_path)


def test_a_walk_whose_arrays_are_lost_is_walked_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for i, log in enumerate(SHOP[:4]):
        put_log(log, home / "logs/shop", i % 2)
    ingest(home)
    walked(home, 10**9, [])
    (arrays,) = PartStore(Layout.at(home)).root.rglob("*.alpha-*.npz")
    arrays.write_bytes(b"not an archive")
    said: list[str] = []
    # a vocabulary with no kept fit needs the arrays: they are walked again from the start
    _, fresh = walked(home, 10**9, said, VOCABULARY + 1)
    assert "fitting α: walking up to 4 sessions after the 0 walked before" in said
    assert same_walk(fresh, from_start(home, 10**9)[1])
    shutil.rmtree(tmp_path)


def test_the_walks_arrays_and_likelihood_are_their_definitions_written_out() -> None:
    """Each walked step's n(c) and n(c, a) at each level are the counts over the steps before
    it, and the log-likelihood the back-off formula step by step (both computed faster than
    that: one sort per key, the grid in place over threads)."""
    import random

    import duckdb

    from stretto.model.habit import START, prequential_loglik
    from warehouse.counts.alphafit import walked_histories
    from warehouse.counts.learn import count_steps

    rng = random.Random(5)
    tools = ["find", "get", "list", "pay"]
    rows = []
    for s in range(40):
        for step in range(rng.randrange(1, 9)):
            reply = rng.random() < 0.15
            rows.append(
                (
                    f"s{s}",
                    step,
                    "respond" if reply else rng.choice(tools),
                    "reply" if reply else "tool",
                    rng.choice(["reply", "end"]) if reply else rng.choice(["ok", "ok", "failed"]),
                    s,
                )
            )
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE steps (session VARCHAR, step INTEGER, action VARCHAR, kind VARCHAR, "
        "outcome VARCHAR, session_order BIGINT)"
    )
    con.executemany("INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?)", rows)
    count_steps(con, "SELECT * FROM steps", {"pay": "write"})  # leaves `histories`
    arrays, _, stopped = walked_histories(con, max_steps=10**6)
    assert stopped is None

    def symbol(action: str, kind: str, outcome: str) -> str:
        if kind == "tool":
            return action + (" (error)" if outcome == "failed" else "")
        return "respond" if outcome == "reply" else "respond (end)"

    steps, last = [], {}
    for session, _, action, kind, outcome, _ in rows:  # rows are in learning order
        h2, h1 = last.get(session, (START, START))
        steps.append((h2, h1, action))
        last[session] = (h1, symbol(action, kind, outcome))
    expected: dict[str, list[int]] = {c: [] for c in ("n0", "na0", "n1", "na1", "n2", "na2")}
    for i, (h2, h1, action) in enumerate(steps):
        before = steps[:i]
        expected["n0"].append(i)
        expected["na0"].append(sum(a == action for _, _, a in before))
        expected["n1"].append(sum(b1 == h1 for _, b1, _ in before))
        expected["na1"].append(sum((b1, a) == (h1, action) for _, b1, a in before))
        expected["n2"].append(sum((b2, b1) == (h2, h1) for b2, b1, _ in before))
        expected["na2"].append(sum(b == (h2, h1, action) for b in before))
    assert {c: a.tolist() for c, a in arrays.items()} == expected

    alphas = [0.05, 0.7, 3.0]
    written_out = []
    for alpha in alphas:
        total = 0.0
        for j in range(len(steps)):
            p = 1.0 / 6
            for level in "012":
                n, na = expected[f"n{level}"][j], expected[f"na{level}"][j]
                if n > 0:
                    p = (na + alpha * p) / (n + alpha)
            total += np.log(p)
        written_out.append(total)
    floats = {c: np.asarray(v, np.float64) for c, v in expected.items()}
    assert np.allclose(prequential_loglik(floats, alphas, 6), written_out, rtol=1e-12)
