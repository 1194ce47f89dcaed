"""Several servers in one host session, learned as one session (docs/formats.md §2, "Several
servers in one host session").

A host (Claude Desktop, an IDE, an agent framework) runs one proxy per server; each writes
its own log. A log whose proxy was given `--server-name NAME` has its tools named
`NAME::tool` when learned, and the logs of one host session (the header's `host_session`)
that overlap in time are merged into one session — their lines in time order — so a flow
learns that after `github::get_issue` the agent reads `docs::search`. A log without a server
name is learned as before, on its own and with its tools' own names.

Two logs of the same server name that overlap in one host session cannot be told apart by
their tools' names: that group is not merged (each log is learned on its own), with a warning.

`apply` rewrites the rows on a catalogue connection (warehouse/sql/merge.sql) and points the
views `sessions`, `calls`, `context`, `tools` and `steps` at them, so everything learning reads
downstream (the plan and its parts, counts, bindings, the binding replay) sees merged sessions
and knows nothing of this.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from stretto.logs.hostsession import Log, Units, plan
from warehouse.layout import Layout
from warehouse.sql import statements
from warehouse.store import table_select

__all__ = ["Log", "Units", "apply", "logs_to_learn", "plan"]

MEMBERS_SCHEMA = (
    ("session", pa.string()),
    ("unit", pa.string()),
    ("prefix", pa.string()),
    ("member_rank", pa.int64()),
    ("started_unix_ms", pa.int64()),
    ("reward", pa.float64()),
)
MERGED_TABLES = ("sessions", "calls", "context", "tools")


def logs_to_learn(con, sessions: list[str]) -> list[Log]:
    """The merge's view of these sessions (their start, end, host session, server name). Only
    logs with a server name are looked at further (their last line's time): the biggest
    table is not read for a warehouse without any."""
    con.register("to_learn_arrow", pa.table({"session": pa.array(sessions, pa.string())}))
    try:
        rows = con.execute(
            "SELECT session, started_unix_ms, host_session, server_name, reward FROM sessions "
            "SEMI JOIN to_learn_arrow USING (session)"
        ).fetchall()
        named = [r[0] for r in rows if r[3]]
        last: dict[str, int] = {}
        if named:
            con.register("named_arrow", pa.table({"session": pa.array(named, pa.string())}))
            last = dict(
                con.execute(
                    "SELECT session, max(t_ms) FROM messages SEMI JOIN named_arrow "
                    "USING (session) GROUP BY session"
                ).fetchall()
            )
            con.unregister("named_arrow")
    finally:
        con.unregister("to_learn_arrow")
    found = {
        s: Log(s, start or 0, (start or 0) + (last.get(s) or 0), host, server, reward)
        for s, start, host, server, reward in rows
    }
    return [found[s] for s in sessions if s in found]


def apply(con, layout: Layout, units: Units, rewards: Mapping[str, float] | None = None) -> None:
    """Rewrite the renamed logs' rows as their units' and point the views at them. A unit's
    reward is its logs' least (each log's from `rewards` when it names the log)."""
    members: dict[str, list] = {
        "session": [],
        "unit": [],
        "prefix": [],
        "member_rank": [],
        "started_unix_ms": [],
        "reward": [],
    }
    for unit in units.units:
        if not any(log.server_name for log in unit):
            continue
        for rank, log in enumerate(unit):
            members["session"].append(log.session)
            members["unit"].append(units.unit_id(unit))
            members["prefix"].append(log.server_name)
            members["member_rank"].append(rank)
            members["started_unix_ms"].append(log.started_ms)
            members["reward"].append((rewards or {}).get(log.session, log.reward))
    con.register(
        "members_arrow",
        pa.table(members, schema=pa.schema(MEMBERS_SCHEMA)),
    )
    con.execute("CREATE OR REPLACE TEMP TABLE members AS SELECT * FROM members_arrow")
    con.unregister("members_arrow")
    for _, sql in statements("merge"):
        con.execute(sql)
    for table in MERGED_TABLES:
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW {table} AS "
            f"SELECT * FROM ({table_select(con, layout, table)}) ANTI JOIN members USING (session) "
            f"UNION ALL BY NAME SELECT * FROM merged_{table}"
        )
    # the merged sessions' steps, by the rule ingest derives them with, over the merged rows
    con.execute(
        "CREATE OR REPLACE TEMP TABLE pending_steps AS "
        "SELECT DISTINCT session, ingest_id FROM merged_calls "
        "UNION SELECT DISTINCT session, ingest_id FROM merged_context"
    )
    (steps,) = [sql for name, sql in statements("steps") if name == "steps"]
    con.execute(f"CREATE OR REPLACE TEMP TABLE merged_steps AS {steps}")
    con.execute(
        "CREATE OR REPLACE TEMP VIEW steps AS "
        f"SELECT * FROM ({table_select(con, layout, 'steps')}) ANTI JOIN members USING (session) "
        "UNION ALL BY NAME SELECT * FROM merged_steps"
    )
