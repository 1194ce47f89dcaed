"""Counting a flow's parts (domain and day) in DuckDB, and what of a flow is computed over
the parts rather than added up (warehouse/counts/daycounts.py says which and why)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from stretto.model.binding import bare_lookups, learn_constants
from stretto.model.shape import is_path, learn_shapes, minimal_roots
from warehouse.counts.daycounts import PartCounts, PartStore, Summed, digest, part_key
from warehouse.datastore import sql_text
from warehouse.layout import Layout
from warehouse.sql import statements as sql_statements

# Fitting α replays the habit online over the steps; past this many it gains nothing.
ALPHA_FIT_STEPS = 300_000
# An episode succeeded when its reward is at least this (Episode.succeeded: reward >= 1).
SUCCESS_REWARD = 1 - 1e-9
COUNTS_VERSION = 1  # bump when the SQL changes what a part's counts hold
STEPS_OF_WANTED = (
    "SELECT s.session, s.step, s.action, s.kind, s.outcome, w.session_order, w.part "
    "FROM wanted_steps s JOIN wanted w USING (session)"
)
NARROWED = ("calls", "context", "steps", "tools")  # set_wanted's wanted_<table> views
# Parts to count (or replay) are taken a few at a time, at most about this many sessions at
# once, so a full recount's memory stays that of a few days however large the archive grows;
# a part's counts depend on its own sessions only, so the chunks change no figure.
CHUNK_SESSIONS = 5_000


@dataclass
class Plan:
    """The sessions a flow learns from, in learning order, and their parts."""

    rows: list[tuple[str, int, str, int]] = field(default_factory=list)  # session, order, part, ms
    models: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)  # in order of first session
    keys: dict[str, str] = field(default_factory=dict)  # part -> digest of its sessions
    days: dict[str, str] = field(default_factory=dict)  # part -> day
    ingests: list[str] = field(default_factory=list)  # each row's session's ingest run
    # host sessions merged (warehouse.counts.merge): a unit's rows lie in its logs' partitions,
    # which need not be the unit's part
    merged: bool = False

    @property
    def order(self) -> list[str]:
        return [r[0] for r in self.rows]

    def rows_of(self, parts: Collection[str]) -> list[tuple[str, int, str, int]]:
        wanted = set(parts)
        return [r for r in self.rows if r[2] in wanted]

    def chunks(self, parts: Collection[str], most: int | None = None) -> list[list[str]]:
        """`parts` in plan order, in runs of whole parts holding at most `most` sessions
        (CHUNK_SESSIONS by default; a larger part alone)."""
        most = CHUNK_SESSIONS if most is None else most
        sizes = Counter(row[2] for row in self.rows)
        wanted = set(parts)
        out: list[list[str]] = []
        held = most  # full: the first part starts a run
        for part in (p for p in self.parts if p in wanted):
            if held + sizes[part] > most:
                out.append([])
                held = 0
            out[-1].append(part)
            held += sizes[part]
        return out


def plan_sessions(
    con,
    domain: str | None,
    sessions: Collection[str] | None,
    rewards: Mapping[str, float] | None = None,
) -> Plan:
    """The successful sessions (of `domain`, or all; only `sessions` when given) in the order
    they started, each with its part. A session's reward is `rewards`' when it names the
    session, else its header's."""
    where = "WHERE TRUE" if rewards else "WHERE (reward IS NULL OR reward >= $success)"
    params: dict = {} if rewards else {"success": SUCCESS_REWARD}
    if domain is not None:
        where += " AND domain = $domain"
        params["domain"] = domain
    found = con.execute(
        "SELECT session, agent_model, ingest_id, domain, day::VARCHAR, started_unix_ms, reward "
        f"FROM sessions {where} ORDER BY started_unix_ms, session",
        params,
    ).fetchall()
    plan = Plan()
    members: dict[str, list[tuple[str, str]]] = {}
    for session, model, ingest_id, dom, day, started, reward in found:
        if sessions is not None and session not in sessions:
            continue
        if rewards:
            reward = rewards.get(session, reward)
            if reward is not None and reward < SUCCESS_REWARD:
                continue  # a failed episode
        part = part_key(dom, day)
        if part not in members:
            plan.parts.append(part)
            plan.days[part] = day
            members[part] = []
        members[part].append((session, ingest_id))
        plan.rows.append((session, len(plan.rows), part, started or 0))
        plan.ingests.append(ingest_id)
        plan.models.append(model)
    plan.keys = {p: digest([COUNTS_VERSION, sorted(m)]) for p, m in members.items()}
    return plan


def set_wanted(
    con,
    rows: list[tuple[str, int, str, int]],
    merged: bool = False,
    tables: Collection[str] = NARROWED,
) -> None:
    """The temp table `wanted(session, session_order, part, started_unix_ms)` (one insert),
    and the views `wanted_<table>` of `tables` (of NARROWED): the table's rows in the wanted
    parts' domains and days only, so a query joining them to `wanted` reads only those
    partitions' files (of every partition when sessions were `merged`)."""
    table = pa.table(
        {
            "session": pa.array([r[0] for r in rows], pa.string()),
            "session_order": pa.array([r[1] for r in rows], pa.int64()),
            "part": pa.array([r[2] for r in rows], pa.string()),
            "started_unix_ms": pa.array([r[3] for r in rows], pa.int64()),
        }
    )
    con.register("wanted_arrow", table)
    con.execute("CREATE OR REPLACE TEMP TABLE wanted AS SELECT * FROM wanted_arrow")
    con.unregister("wanted_arrow")
    where = "TRUE"
    if not merged:
        domains = sorted({r[2].split("/")[0] for r in rows})
        days = sorted({r[2].split("/")[1] for r in rows})
        where = (
            f"domain IN ({', '.join(map(sql_text, domains)) or 'NULL'}) "
            f"AND day IN ({', '.join(f'DATE {sql_text(d)}' for d in days) or 'NULL'})"
        )
    for table in tables:
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW wanted_{table} AS SELECT * FROM {table} WHERE {where}"
        )


def _fresh(store: PartStore, plan: Plan, what: str, parts: list[str]) -> tuple[dict, list[str]]:
    """The parts' files read back, and the parts that have none (to compute)."""
    found, stale = {}, []
    for part in parts:
        data = store.load(part, plan.keys[part], what)
        if data is None:
            stale.append(part)
        else:
            found[part] = data
    return found, stale


def listing(con, layout: Layout, plan: Plan) -> tuple[dict, dict, dict]:
    """Kinds, docs and contracts from the sessions' tool lists: a later listing wins. Each part
    keeps its latest listing of each tool with its session's place; the latest of those wins."""
    store = PartStore(layout)
    found, stale = _fresh(store, plan, "listing", plan.parts)
    if stale:
        set_wanted(con, plan.rows_of(stale), plan.merged, ["tools"])
        rows = con.execute(
            "SELECT w.part, t.tool, w.started_unix_ms, t.session, t.kind, t.summary, t.arg_docs, "
            "t.contract FROM wanted_tools t JOIN wanted w USING (session) "
            "ORDER BY w.session_order"
        ).fetchall()
        computed: dict[str, dict] = {p: {} for p in stale}
        for part, tool, started, session, *entry in rows:
            computed[part][tool] = [[started, session], *entry]
        for part, tools in computed.items():
            store.save(part, plan.keys[part], "listing", tools)
        found.update(computed)
    latest: dict[str, list] = {}
    for part in plan.parts:
        for tool, entry in found[part].items():
            if tool not in latest or entry[0] > latest[tool][0]:
                latest[tool] = entry
    kinds, docs, contracts = {}, {}, {}
    for tool, (_, kind, summary, arg_docs, contract) in sorted(
        latest.items(), key=lambda i: i[1][0]
    ):
        kinds[tool] = kind
        args = json.loads(arg_docs) if arg_docs else {}
        if summary or args:
            docs[tool] = {"summary": summary or "", "args": args}
        contracts[tool] = contract
    return kinds, docs, contracts


def count_parts(con, steps_query: str, kinds: dict[str, str]) -> dict[str, PartCounts]:
    """The step counts (habit, reach, sites, steps) of each part of the steps `steps_query`
    selects (session, step, action, kind, outcome, session_order, part); leaves `histories`
    on the connection."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW learn_steps AS {steps_query}")
    con.execute("CREATE OR REPLACE TEMP TABLE kinds (tool VARCHAR, kind VARCHAR)")
    if kinds:
        con.executemany("INSERT INTO kinds VALUES (?, ?)", sorted(kinds.items()))
    queries = dict(sql_statements("counts"))
    con.execute(queries["histories"])
    parts: dict[str, PartCounts] = {}

    def part(name: str) -> PartCounts:
        return parts.setdefault(name, PartCounts())

    for name, *row in con.execute(queries["habit"]).fetchall():
        part(name).habit.append(row)
    for name, *row in con.execute(queries["reach"]).fetchall():
        part(name).reach.append(row)
    for name, after, failed, lookup, n in con.execute(queries["sites"]).fetchall():
        part(name).sites.append([after, bool(failed), lookup, int(n)])
    for name, n in con.execute(queries["part_steps"]).fetchall():
        part(name).steps = int(n)
    return parts


def _found(hits: list | None) -> list[list]:
    tally: dict[tuple[str, str], int] = {}
    for hit in hits or []:
        key = (hit["source"], hit["path"])
        tally[key] = tally.get(key, 0) + 1
    return [[s, p, n] for (s, p), n in sorted(tally.items())]


def count_bindings(con, parts: dict[str, PartCounts], with_constants: bool) -> None:
    """Add each part's bindings tallies (args, sources, lists, constants) to `parts`, from
    the tables `wanted` and `kinds` already on the connection (warehouse/sql/bindings.sql)."""
    queries = dict(sql_statements("bindings"))
    con.execute(queries["binding_path"])
    con.execute(queries["read_calls"])

    def part(name: str) -> PartCounts:
        return parts.setdefault(name, PartCounts())

    for name, tool, arg, n in con.execute(queries["args"]).fetchall():
        part(name).args.append([tool, arg, int(n)])
    con.execute(queries["string_values"])
    for name, tool, arg, values, found in con.execute(queries["sources"]).fetchall():
        part(name).sources.append([tool, arg, int(values), _found(found)])
    for name, tool, arg, values, found in con.execute(queries["lists"]).fetchall():
        part(name).lists.append([tool, arg, int(values), _found(found)])
    for name, tool, arg, values, shortest, longest, chars, folders in con.execute(
        queries["shapes"]
    ).fetchall():
        roots = minimal_roots("/" if f == "" else f for f in folders) if is_path(chars) else []
        row = [tool, arg, int(values), int(shortest), int(longest), chars, roots]
        part(name).shapes.append(row)
    if with_constants:
        for name, tool, arg, value, n, distinct in con.execute(queries["constants"]).fetchall():
            part(name).constants.append([tool, arg, value, int(n), int(distinct)])


def counted_parts(
    con,
    layout: Layout,
    plan: Plan,
    kinds: dict[str, str],
    with_constants: bool,
    only_days: Collection[str] | None,
    say: Callable[[str], None],
) -> dict[str, PartCounts]:
    """Every part's counts (with `only_days`, those days' parts'): read back when counted
    before with the same sessions and kinds, else counted now, in one pass over the steps of
    the parts to count."""
    store = PartStore(layout)
    # (parts counted before shapes, or their roots, were learned lack them: "shapes-roots"
    # in the digest recounts)
    what = f"counts-{digest([sorted(kinds.items()), with_constants, 'shapes-roots'])}"
    parts = (
        plan.parts if only_days is None else [p for p in plan.parts if plan.days[p] in only_days]
    )
    found, stale = _fresh(store, plan, what, parts)
    counts = {p: PartCounts.from_json(d) for p, d in found.items()}
    if stale:
        say(f"counting {len(stale)} of {len(parts)} parts (domain and day); the others are kept")
        for chunk in plan.chunks(stale):
            set_wanted(con, plan.rows_of(chunk), plan.merged, ["steps", "calls"])
            computed = count_parts(con, STEPS_OF_WANTED, kinds)
            count_bindings(con, computed, with_constants)
            for part in chunk:
                counted = computed.get(part, PartCounts())
                store.save(part, plan.keys[part], what, counted.to_json())
                counts[part] = counted
    return counts


def bindings_from(summed: Summed, with_constants: bool) -> dict:
    """`args`, `sources`, `bare` (and `lists`, `constants`) of the flow's bindings
    (docs/formats.md §3) from the summed tallies."""
    args = summed.args
    bindings: dict = {
        "args": {
            t: {"calls": e["calls"], "passed": dict(sorted(e["passed"].items()))}
            for t, e in sorted(args.items())
        },
        "sources": summed.sources,
        "bare": bare_lookups(args, summed.empty),
        # what each argument's strings looked like: a value taken from a result must too
        "shapes": learn_shapes(summed.shapes),
    }
    if summed.lists:
        bindings["lists"] = summed.lists
    if with_constants:
        found = {(e["tool"], e["arg"]) for e in summed.sources if e["found"]}
        bindings["constants"] = learn_constants(
            {t: e["calls"] for t, e in args.items()}, summed.constants, found
        )
    return bindings
