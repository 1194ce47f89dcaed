"""Which sessions train the habit, and how much each counts: `learn --half-life H` and
`--rewards FILE` (warehouse/sql/weights.sql; ../shared/spec/algorithms.md §2.4).

warehouse.counts.learn.learn_flow chooses its sessions with `choose_sessions` (the `wanted` table:
session, agent_model, session_order, weight) and, given a half-life, takes the weighted
`habit` and `reach` in place of counts.sql's (equal to them when every weight is 1, so they are
computed only then). Sites, bindings and the fit of α stay unweighted, as the reference's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pyarrow as pa

from warehouse.counts.daycounts import levels
from warehouse.counts.partcount import SUCCESS_REWARD
from warehouse.sql import statements as sql_statements


def half_life_weights(n: int, half_life: float | None) -> list[float]:
    """The weight of the i-th of n sessions in start order: 0.5 ** ((n - 1 - i) / half_life)."""
    if half_life is None:
        return [1.0] * n
    if not half_life > 0:
        raise ValueError(f"--half-life wants a number of sessions above 0, got {half_life}")
    return [0.5 ** ((n - 1 - i) / half_life) for i in range(n)]


def choose_sessions(
    con,
    *,
    domain: str | None = None,
    sessions: Collection[str] | None = None,
    rewards: Mapping[str, float] | None = None,
    half_life: float | None = None,
) -> list[tuple[str, str, int, float]]:
    """Create the temp table `wanted(session, agent_model, session_order, weight)` on `con`
    (which has the `sessions` view) and return its rows in learning order. `sessions`: only
    these (a staged flow as it was before a session, a fold's flow)."""
    half_life_weights(0, half_life)  # refuse a bad half-life before any SQL
    con.register(
        "rewards_arrow",
        pa.table(
            {
                "session": pa.array(list((rewards or {}).keys()), pa.string()),
                "reward": pa.array(list((rewards or {}).values()), pa.float64()),
            }
        ),
    )
    con.execute("CREATE OR REPLACE TEMP TABLE rewards AS SELECT * FROM rewards_arrow")
    con.unregister("rewards_arrow")
    con.execute(
        dict(sql_statements("weights"))["wanted"],
        {
            "domain": domain,
            "sessions": None if sessions is None else list(sessions),
            "success": SUCCESS_REWARD,
            "half_life": half_life,
        },
    )
    return [
        tuple(row)
        for row in con.execute(
            "SELECT session, agent_model, session_order, weight FROM wanted ORDER BY session_order"
        ).fetchall()
    ]


def weighted_counts(con) -> tuple[dict, dict]:
    """(habit, reach) counts weighted by `wanted.weight`, over the `histories` table that
    warehouse.counts.learn.count_steps made on `con`."""
    queries = dict(sql_statements("weights"))
    habit = levels([list(row) for row in con.execute(queries["habit"]).fetchall()])
    reach = levels([list(row) for row in con.execute(queries["reach"]).fetchall()])
    return habit, reach
