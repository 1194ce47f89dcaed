"""The counts of a flow, computed by DuckDB over the warehouse's steps (warehouse/sql/counts.sql).

Returns plain Python structures; stretto.model.flow turns them into a flow file. Counts are sums
over sessions, so counts from disjoint sets of sessions add up: a flow is the sum of the counts
of its parts, one per domain and day (warehouse/counts/daycounts.py says what adds and what is
recomputed).

`learn_domain` is the entry a caller (the flow asset, `stretto learn`) uses: a domain's flow
from the warehouse with plain options, its provenance complete; `learner` is the same learning
for a given set of sessions (the surprise gate's folds, `stretto stage`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stretto.logs.domain import is_valid_domain
from stretto.logs.episode import Episode, in_start_order, read_episode
from stretto.logs.otel import CONVENTIONS
from stretto.logs.rewards import with_rewards
from stretto.model.flow import build_flow
from stretto.vocabulary import RESPOND
from warehouse import store
from warehouse.counts import merge, weights
from warehouse.counts.agreement import replayed
from warehouse.counts.alphafit import fitted_alpha, walked_histories
from warehouse.counts.daycounts import PartCounts, add_up, levels
from warehouse.counts.partcount import (
    SUCCESS_REWARD,
    Plan,
    bindings_from,
    count_parts,
    counted_parts,
    listing,
    plan_sessions,
)
from warehouse.layout import Layout


@dataclass
class Counts:
    habit: dict[tuple[str, ...], dict[str, float]] = field(default_factory=dict)
    reach: dict[tuple[str, ...], dict[str, float]] = field(default_factory=dict)
    sites: dict[tuple[str, bool], dict[str, int]] = field(default_factory=dict)
    steps: int = 0
    prequential: dict[str, np.ndarray] = field(default_factory=dict)


def count_steps(con, steps_query: str, kinds: dict[str, str]) -> Counts:
    """Counts over the steps `steps_query` selects (session, step, action, kind, outcome,
    session_order), on an open connection to the warehouse: all of them as one part."""
    parts = count_parts(con, f"SELECT *, '' AS part FROM ({steps_query})", kinds)
    counts = parts.get("", PartCounts())
    arrays, _, _ = walked_histories(con)
    return Counts(
        habit=levels(counts.habit),
        reach=levels(counts.reach),
        sites={
            (after, bool(failed)): cell for (after, failed), cell in add_up([counts]).sites.items()
        },
        steps=counts.steps,
        prequential={k: v.astype(np.float64) for k, v in arrays.items()},
    )


def domains(layout: Layout) -> list[str]:
    """The domains with a session to learn from (a successful one). Only valid domain names
    (stretto.logs.domain): each names a flow file (a warehouse written before the rule could
    hold another)."""
    return sorted({domain for domain, _ in domain_days(layout)})


def domain_days(layout: Layout) -> list[tuple[str, str]]:
    """Every (domain, day) with a session to learn from, in day order."""
    return [
        (r["domain"], str(r["day"]))
        for r in store.query(
            layout,
            "SELECT DISTINCT domain, day FROM sessions "
            f"WHERE reward IS NULL OR reward >= {SUCCESS_REWARD!r} ORDER BY day, domain",
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
    *,
    sessions: Collection[str] | None = None,
    rewards: Mapping[str, float] | None = None,
    half_life: float | None = None,
    only_days: Collection[str] | None = None,
    say: Callable[[str], None] = lambda message: None,
    warn: Callable[[str], None] | None = None,
) -> dict:
    """Learn the `domain` flow from the warehouse's successful sessions (all of them, or with
    `only_domain` those whose log header names the domain; with `sessions`, only those), in
    the order they started. A session is successful when its reward (`rewards`' if it names
    the session, else its header's) is missing (a recorded session) or at least 1
    (SUCCESS_REWARD); failed episodes are not learned from.

    The flow is the sum of its parts' counts (warehouse/counts/daycounts.py): a part counted before
    with the same sessions is read back, not counted again. With `only_days`, only the parts
    of those days are brought up to date and nothing is learned (the `counts` asset): returns
    {}. With `half_life`, older sessions count less in the habit and reach: those two are
    then counted afresh, weighted (warehouse.counts.weights; a weight depends on the whole set, so
    weighted counts do not add up by part). `say` hears progress; `warn` (else `say`) the
    logs of one host session that could not be merged (warehouse.counts.merge)."""
    weights.half_life_weights(0, half_life)  # a bad half-life is refused before any work
    con = store.open_catalogue(layout)
    try:
        plan = learned_units(
            con, layout, domain if only_domain else None, sessions, rewards, warn or say
        )
        if not plan.order:
            if only_days is not None:
                return {}
            raise LearnError(
                f"no successful sessions to learn the {domain} flow from in {layout.warehouse}"
            )
        kinds, docs, contracts = listing(con, layout, plan)
        read_by_operator: list[str] = []
        if manifest is not None:
            # a read the server never marked readOnlyHint: true rests on the operator's word
            read_by_operator = [
                t for t, k in manifest["tools"].items() if k == "read" and kinds.get(t) != "read"
            ]
            kinds = dict(manifest["tools"])
            docs = dict(manifest.get("docs") or {})
        parts = counted_parts(con, layout, plan, kinds, with_constants, only_days, say)
        if only_days is not None:
            return {}
        summed = add_up([parts[p] for p in plan.parts])
        bindings = bindings_from(summed, with_constants)
        reads = {t for t, k in kinds.items() if k == "read"}
        bindings["agreed"], named = replayed(con, layout, plan, bindings, reads, say)
        if named:  # issue 19
            bindings["named_other"] = named
        if half_life is not None:
            summed.habit, summed.reach = _weighted(con, plan, kinds, rewards, half_life)
        actions = {a for c in summed.habit.values() for a in c} | set(kinds) | {RESPOND}
        alpha_fit, _ = fitted_alpha(con, layout, plan, parts, kinds, len(actions) + 1, say)
    finally:
        con.close()
    return build_flow(
        domain=domain,
        kinds=kinds,
        docs=docs,
        contracts=contracts,
        habit=summed.habit,
        reach=summed.reach,
        sites=summed.sites,
        alpha_fit=alpha_fit,
        sources=plan.models,
        episodes=len(plan.order),
        steps=summed.steps,
        bindings=bindings,
        now_ms=now_ms,
        read_by_operator=read_by_operator,
    )


def learned_units(
    con,
    layout: Layout,
    domain: str | None,
    sessions: Collection[str] | None,
    rewards: Mapping[str, float] | None,
    say: Callable[[str], None],
) -> Plan:
    """The plan of the sessions learning sees. The logs of several servers of one host session
    (a header's `server_name`) are merged into one session first, at the catalogue
    (warehouse.counts.merge: the views `sessions`, `calls`, `context`, `tools` and `steps` then give
    the merged sessions), so planning, the parts' digests and every count see only those; a
    log without a server name is planned as it is, and without any the plan is untouched."""
    plan = plan_sessions(con, domain, sessions, rewards)
    units = merge.plan(merge.logs_to_learn(con, plan.order))
    for warning in units.warnings:
        say(f"warning: {warning}")
    if not units.renamed:
        return plan
    merge.apply(con, layout, units, rewards)
    merged = plan_sessions(con, domain, {units.unit_id(u) for u in units.units}, rewards)
    merged.merged = True
    return merged


def _weighted(con, plan, kinds: dict[str, str], rewards, half_life: float) -> tuple[dict, dict]:
    """The habit and reach of the plan's sessions, each weighted by its age
    (warehouse.counts.weights)."""
    weights.choose_sessions(con, sessions=plan.order, rewards=rewards, half_life=half_life)
    count_steps(
        con,
        "SELECT s.session, s.step, s.action, s.kind, s.outcome, w.session_order "
        "FROM steps s JOIN wanted w USING (session)",
        kinds,
    )
    return weights.weighted_counts(con)


class LearnError(RuntimeError):
    pass


@dataclass(frozen=True)
class HabitOptions:
    """How a domain's flow is learned from the warehouse (`stretto learn`'s options, the flow
    asset's config): learn_flow's, and whether the logs came from an OpenTelemetry export."""

    manifest: dict | None = None  # a tool manifest instead of the logs' tool lists
    only_domain: bool = False  # only the sessions whose log header names the domain
    with_constants: bool = False  # learn arguments the agent always passes the same way
    rewards: Mapping[str, float] | None = None  # a rewards file's, winning over the logs'
    half_life: float | None = None  # sessions: older ones count less in the habit
    otel: bool = False  # the logs were converted from an OpenTelemetry export


def learn_domain(
    layout: Layout,
    domain: str,
    options: HabitOptions,
    *,
    sessions: Collection[str] | None = None,
    say: Callable[[str], None] = lambda message: None,
    warn: Callable[[str], None] | None = None,
) -> dict:
    """The `domain` flow learned from the warehouse's sessions (with `sessions`, only those) as
    `options` say (learn_flow), its provenance naming the half-life and the conventions."""
    learned = learn_flow(
        layout,
        domain,
        manifest=options.manifest,
        only_domain=options.only_domain,
        with_constants=options.with_constants,
        sessions=sessions,
        rewards=options.rewards,
        half_life=options.half_life,
        say=say,
        warn=warn,
    )
    return with_provenance(learned, options.half_life, options.otel)


def with_provenance(learned: dict, half_life: float | None, otel: bool = False) -> dict:
    """The learned flow's provenance names the half-life it was weighted with and, for logs
    converted from an OpenTelemetry export, the conventions they were read by."""
    if half_life is not None:
        learned["provenance"]["half_life"] = half_life
    if otel:
        learned["provenance"]["conventions"] = CONVENTIONS
    return learned


def learner(
    layout: Layout,
    domain: str,
    *,
    manifest: dict | None = None,
    only_domain: bool = False,
    with_constants: bool = False,
    rewards: Mapping[str, float] | None = None,
    half_life: float | None = None,
) -> Callable[[list[Episode]], dict]:
    """episodes -> the habit-only flow learned from those of the warehouse's sessions (a fold
    of the surprise gate's or the calibration's, the sessions before one being staged), as
    the flow asset learns, with no pipeline run (no flow file is written)."""
    options = HabitOptions(manifest, only_domain, with_constants, rewards, half_life)

    def learn(episodes: list[Episode]) -> dict:
        return learn_domain(layout, domain, options, sessions=[e.id for e in episodes])

    return learn


def warehouse_episodes(
    layout: Layout, domain: str | None = None, rewards: Mapping[str, float] | None = None
) -> list[Episode]:
    """The warehouse's sessions (of `domain`, else all) read from their logs as episodes, in
    start order, with the rewards file's rewards."""
    where = "WHERE domain = $domain" if domain else ""
    con = store.open_catalogue(layout)
    try:
        files = con.execute(
            f"SELECT file FROM sessions {where}", {"domain": domain} if domain else {}
        ).fetchall()
    finally:
        con.close()
    return with_rewards(in_start_order(read_episode(layout.home / f) for (f,) in files), rewards)


def sessions_by_task(layout: Layout, domain: str, only_domain: bool) -> list[tuple[str, str, str]]:
    """(session, task, log file) of every session the flow may learn from, in start order: a
    session's task is its header's task_id, else the session itself."""
    rows = store.query(
        layout,
        "SELECT session, domain, file, header_extra FROM sessions "
        "ORDER BY started_unix_ms, session",
    ).to_pylist()
    out = []
    for row in rows:
        if only_domain and row["domain"] != domain:
            continue
        extra = json.loads(row["header_extra"]) if row["header_extra"] else {}
        task = extra.get("task_id") if isinstance(extra, dict) else None
        ok = isinstance(task, str | int) and not isinstance(task, bool) and str(task)
        file = Path(row["file"])  # absolute, or relative to the home (as newer warehouses keep it)
        path = file if file.is_absolute() else layout.home / file
        out.append((row["session"], str(task) if ok else row["session"], str(path)))
    return out
