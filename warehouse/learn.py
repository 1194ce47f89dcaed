"""The counts of a flow, computed by DuckDB over the warehouse's steps (warehouse/sql/counts.sql).

Returns plain Python structures; stretto.model.flow turns them into a flow file. Counts are sums
over sessions, so counts from disjoint sets of sessions add up.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from stretto.logs.domain import is_valid_domain
from stretto.model.binding import Rules, agreement, bare_lookups, learn_constants
from stretto.model.flow import build_flow
from stretto.model.habit import fit_alpha
from warehouse import merge, store
from warehouse.layout import Layout
from warehouse.sql import statements as sql_statements

# Fitting α replays the habit online over the steps; past this many it gains nothing.
ALPHA_FIT_STEPS = 300_000
# An episode succeeded when its reward is at least this (Episode.succeeded: reward >= 1).
SUCCESS_REWARD = 1 - 1e-9


@dataclass
class Counts:
    habit: dict[tuple[str, ...], dict[str, float]] = field(default_factory=dict)
    reach: dict[tuple[str, ...], dict[str, float]] = field(default_factory=dict)
    sites: dict[tuple[str, bool], dict[str, int]] = field(default_factory=dict)
    steps: int = 0
    prequential: dict[str, np.ndarray] = field(default_factory=dict)


def _levels(rows: list[tuple]) -> dict[tuple[str, ...], dict[str, float]]:
    out: dict[tuple[str, ...], dict[str, float]] = {}
    for level, h2, h1, action, n in rows:
        history = () if level == 0 else (h1,) if level == 1 else (h2, h1)
        out.setdefault(history, {})[action] = float(n)
    return out


def count_steps(con, steps_query: str, kinds: dict[str, str]) -> Counts:
    """Counts over the steps `steps_query` selects (session, step, action, kind, outcome,
    session_order), on an open connection to the warehouse."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW learn_steps AS {steps_query}")
    con.execute("CREATE OR REPLACE TEMP TABLE kinds (tool VARCHAR, kind VARCHAR)")
    if kinds:
        con.executemany("INSERT INTO kinds VALUES (?, ?)", sorted(kinds.items()))
    queries = dict(sql_statements("counts"))
    con.execute(queries["histories"])
    counts = Counts()
    counts.habit = _levels(con.execute(queries["habit"]).fetchall())
    counts.reach = _levels(con.execute(queries["reach"]).fetchall())
    for after, failed, lookup, n in con.execute(queries["sites"]).fetchall():
        counts.sites.setdefault((after, bool(failed)), {})[lookup] = int(n)
    counts.steps = int(con.execute("SELECT count(*) FROM histories").fetchall()[0][0])
    table = con.execute(queries["prequential"], {"max_steps": ALPHA_FIT_STEPS}).fetchnumpy()
    counts.prequential = {k: np.asarray(v, dtype=np.float64) for k, v in table.items()}
    return counts


def _manifest_from_sessions(con, sessions: list[str]) -> tuple[dict, dict, dict]:
    """Kinds, docs and contracts from the sessions' tool lists; a later listing wins."""
    rows = con.execute(
        "SELECT t.tool, t.kind, t.summary, t.arg_docs, t.contract FROM tools t "
        "JOIN wanted w USING (session) ORDER BY w.session_order"
    ).fetchall()
    kinds, docs, contracts = {}, {}, {}
    for tool, kind, summary, arg_docs, contract in rows:
        kinds[tool] = kind
        args = json.loads(arg_docs) if arg_docs else {}
        if summary or args:
            docs[tool] = {"summary": summary or "", "args": args}
        else:
            docs.pop(tool, None)
        contracts[tool] = contract
    return kinds, docs, contracts


def _found(rows: list[tuple]) -> list[dict]:
    """Per lookup argument: how many values it took, and where they were found."""
    out = []
    for tool, arg, values, found in rows:
        tally: dict[tuple[str, str], int] = {}
        for hit in found or []:
            key = (hit["source"], hit["path"])
            tally[key] = tally.get(key, 0) + 1
        out.append(
            {
                "tool": tool,
                "arg": arg,
                "values": int(values),
                "found": [
                    {"source": s, "path": p, "count": n} for (s, p), n in sorted(tally.items())
                ],
            }
        )
    return sorted(out, key=lambda e: (e["tool"], e["arg"]))


def learn_bindings(con, with_constants: bool = False) -> dict:
    """`args` and `sources` of the flow's bindings (docs/formats.md §3), from the tables
    `wanted` and `kinds` already on the connection."""
    queries = dict(sql_statements("bindings"))
    con.execute(queries["binding_path"])
    con.execute(queries["read_calls"])
    args: dict[str, dict] = {}
    empty: dict[str, int] = {}
    for tool, arg, n in con.execute(queries["args"]).fetchall():
        entry = args.setdefault(tool, {"calls": 0, "passed": {}})
        if arg is None:
            entry["calls"] = int(n)
        elif arg == "":
            empty[tool] = int(n)
        else:
            entry["passed"][arg] = int(n)
    con.execute(queries["string_values"])
    sources = _found(con.execute(queries["sources"]).fetchall())
    lists = _found(con.execute(queries["lists"]).fetchall())
    bindings = {
        "args": {
            t: {"calls": e["calls"], "passed": dict(sorted(e["passed"].items()))}
            for t, e in sorted(args.items())
        },
        "sources": sources,
        "bare": bare_lookups(args, empty),
    }
    if lists:
        bindings["lists"] = lists
    if with_constants:
        found = {(e["tool"], e["arg"]) for e in sources if e["found"]}
        rows = con.execute(queries["constants"]).fetchall()
        bindings["constants"] = learn_constants(
            {t: e["calls"] for t, e in args.items()},
            [(tool, arg, json.loads(value), int(n)) for tool, arg, value, n in rows],
            found,
        )
    return bindings


def session_events(con):
    """Each wanted session's events for the binding replay (stretto.model.binding.agreement): user
    messages, the calls of each LLM turn, and results, in log order."""
    rows = con.execute("""
        SELECT session, session_order, seq, 0 AS sub, 'user' AS kind, content AS text,
               NULL AS turn, NULL AS tool, NULL AS arguments, NULL AS ok
        FROM context JOIN wanted USING (session) WHERE role = 'user'
        UNION ALL
        SELECT session, session_order, sent_seq, sent_sub, 'call', NULL, turn, tool,
               arguments::VARCHAR, NULL
        FROM calls JOIN wanted USING (session)
        UNION ALL
        SELECT session, session_order, answered_seq, 0, 'result', result_text, NULL, tool,
               NULL, status = 'ok'
        FROM calls JOIN wanted USING (session) WHERE answered_seq IS NOT NULL
        ORDER BY session_order, seq, sub
    """).fetchall()
    events: list[tuple]  # ("user", text), ("result", tool, ok, text) or ("turn", calls)
    current, events, turn_of = None, [], None
    for session, _, _, _, kind, text, turn, tool, arguments, ok in rows:
        if session != current:
            if current is not None:
                yield events
            current, events, turn_of = session, [], None
        if kind == "user":
            events.append(("user", text or ""))
        elif kind == "result":
            events.append(("result", tool, bool(ok), text or ""))
        elif events and events[-1][0] == "turn" and turn_of == turn:
            events[-1][1].append((tool, json.loads(arguments)))
        else:
            events.append(("turn", [(tool, json.loads(arguments))]))
            turn_of = turn
    if current is not None:
        yield events


def domains(layout: Layout) -> list[str]:
    """The domains with a session to learn from (a successful one). Only valid domain names
    (stretto.logs.domain): each names a flow file (a warehouse written before the rule could
    hold another)."""
    return [
        r["domain"]
        for r in store.query(
            layout,
            "SELECT DISTINCT domain FROM sessions "
            f"WHERE reward IS NULL OR reward >= {SUCCESS_REWARD!r} ORDER BY domain",
        ).to_pylist()
        if is_valid_domain(r["domain"])
    ]


def learn_flow(
    layout: Layout,
    domain: str,
    manifest: dict | None = None,
    only_domain: bool = False,
    with_constants: bool = False,
    now_ms: int | None = None,
    sessions: Collection[str] | None = None,
    say: Callable[[str], None] = lambda message: None,
) -> dict:
    """Learn the `domain` flow from the warehouse's successful sessions (all of them, or with
    `only_domain` those whose log header names the domain), in the order they started. A
    session is successful when its header has no reward (a recorded session) or a reward of
    at least 1 (SUCCESS_REWARD); failed episodes are not learned from."""
    con = store.open_catalogue(layout)
    try:
        where = "WHERE (reward IS NULL OR reward >= $success)"
        where += " AND domain = $domain" if only_domain else ""
        params: dict = {"success": SUCCESS_REWARD}
        if only_domain:
            params["domain"] = domain
        rows = con.execute(
            f"SELECT session, agent_model FROM sessions {where} ORDER BY started_unix_ms, session",
            params,
        ).fetchall()
        if sessions is not None:  # only these: the training side of an arbiter's split
            rows = [r for r in rows if r[0] in sessions]
        # several servers of one host session: one session, tools named server::tool
        units = merge.plan(merge.logs_to_learn(con, [r[0] for r in rows]))
        for warning in units.warnings:
            say(f"warning: {warning}")
        if units.renamed:
            merge.apply(con, layout, units)
            model = dict(rows)
            rows = [(units.unit_id(u), model[u[0].session]) for u in units.units]
        order = [r[0] for r in rows]
        # one insert of the whole list, not a statement per session
        con.register(
            "wanted_arrow",
            pa.table(
                {
                    "session": pa.array(order, pa.string()),
                    "session_order": pa.array(range(len(order)), pa.int64()),
                }
            ),
        )
        con.execute("CREATE OR REPLACE TEMP TABLE wanted AS SELECT * FROM wanted_arrow")
        kinds, docs, contracts = _manifest_from_sessions(con, order)
        if manifest is not None:
            kinds = dict(manifest["tools"])
            docs = dict(manifest.get("docs") or {})
        counts = count_steps(
            con,
            "SELECT s.session, s.step, s.action, s.kind, s.outcome, w.session_order "
            "FROM steps s JOIN wanted w USING (session)",
            kinds,
        )
        bindings = learn_bindings(con, with_constants)
        rules = Rules.from_flow(bindings)
        reads = {t for t, k in kinds.items() if k == "read"}
        bindings["agreed"] = agreement(rules, session_events(con), reads)
    finally:
        con.close()
    if not order:
        raise LearnError(
            f"no successful sessions to learn the {domain} flow from in {layout.warehouse}"
        )
    actions = {a for c in counts.habit.values() for a in c} | set(kinds) | {"respond"}
    alpha_fit = fit_alpha(counts.prequential, len(actions) + 1)
    return build_flow(
        domain=domain,
        kinds=kinds,
        docs=docs,
        contracts=contracts,
        habit=counts.habit,
        reach=counts.reach,
        sites=counts.sites,
        alpha_fit=alpha_fit,
        sources=[r[1] for r in rows],
        episodes=len(order),
        steps=counts.steps,
        bindings=bindings,
        now_ms=now_ms,
    )


class LearnError(RuntimeError):
    pass
