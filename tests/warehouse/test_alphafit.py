"""The fit of α is a walk over the first steps in learning order: a walk kept and continued
over later sessions is the walk from the start, and a walk that reached its limit is not
walked again when a later day comes in (warehouse/alphafit.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from tests.warehouse.helpers import SHOP, ingest, put_log
from warehouse import store
from warehouse.alphafit import COLUMNS, Walk, fitted_alpha
from warehouse.daycounts import PartStore
from warehouse.layout import Layout
from warehouse.learn import learned_units
from warehouse.partcount import counted_parts, listing

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
