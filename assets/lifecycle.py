"""A flow's life after the first learn, in the pipeline: the drift check after each ingest, and
the staged relearning the nightly schedule runs (../shared/spec/algorithms.md §11, §17).

Each domain here is one whose flow is served from the home, `flows/<domain>.flow.json` (for
the others the check only keeps their sessions' facts, for the first check under a flow). The
check and the staging read that domain's sessions from the warehouse; neither ever replaces a
served flow, but with `auto_commit_if_better` (`stretto stage --auto-commit-if-better`)."""

from pathlib import Path

import dagster as dg

from assets.ingest import steps
from assets.metadata import Timings, skipped
from assets.resources import StrettoHome
from stretto.home import Paths
from stretto.logs.episode import read_episode
from stretto.model.flow import FlowError, load_flow
from stretto.offline.lifecycle import stage as staging
from stretto.offline.lifecycle.drift import write_report
from stretto.offline.lifecycle.driftcache import Session, cached_drift, gather_facts
from warehouse import store
from warehouse.counts.learn import LearnError, domains, learner, warehouse_episodes
from warehouse.layout import Layout


def served_flows(layout: Layout) -> dict[str, Path]:
    """domain -> the flow served for it, for each domain of the warehouse that has one (none
    before the first ingest)."""
    if not store.has_warehouse(layout):
        return {}
    found = {d: layout.flow(d) for d in domains(layout)}
    return {d: path for d, path in found.items() if path.is_file()}


def domain_sessions(layout: Layout, newest: int | None = None) -> dict[str, list[Session]]:
    """The warehouse's current sessions by domain (with `newest`, only that many of each, the
    last to start): id, content hash and log file each."""
    keep = (
        ""
        if newest is None
        else "QUALIFY row_number() OVER (PARTITION BY domain "
        f"ORDER BY started_unix_ms DESC, session DESC) <= {int(newest)}"
    )
    con = store.open_catalogue(layout)
    try:
        rows = con.execute(
            f"SELECT domain, session, content_hash, file FROM sessions {keep}"
        ).fetchall()
    finally:
        con.close()
    by: dict[str, list[Session]] = {}
    for domain, session, content, file in rows:
        by.setdefault(domain, []).append(Session(session, content, layout.home / file))
    return by


def drift_cache(layout: Layout, domain: str, decider: str = "habit") -> Path:
    """Where the drift check keeps its per-session values under a domain's served flow."""
    return layout.warehouse / "drift" / f"{domain}.{decider}.json"


@dg.asset_check(
    asset=steps,
    name="drift",
    blocking=False,
    description="Has the agent changed its habits since each served flow was learned? "
    "`stretto drift` on each domain's newest sessions (the `stretto` resource's "
    "drift_sessions, 2,000 by default; its report, data and plot under "
    "reports/DOMAIN/drift-TIME/); a warning while the alarm sounds after the last session. "
    "Only sessions not scored under the same flow before are read and scored "
    "(warehouse/drift/DOMAIN.habit.json keeps the others' values), from their facts when "
    "the check has seen them before (warehouse/drift/DOMAIN.habit.facts.json: gathered for "
    "every domain, served or not, so the first check under a flow reads no log).",
)
def drift_check(
    context: dg.AssetCheckExecutionContext, stretto: StrettoHome
) -> dg.AssetCheckResult:
    layout = stretto.layout()
    timings = Timings(context.log.info)
    per_domain: dict[str, dict] = {}
    served_paths = served_flows(layout)
    if stretto.drift_sessions < 1:
        raise dg.Failure(f"drift_sessions must be at least 1, not {stretto.drift_sessions}")
    # The newest sessions only, so that a check costs the same however large the archive
    # grows: it runs after every ingest and, under `nightly`, scores them all again under each
    # new flow. The alarm is about the last sessions (--window, 10); the others before them
    # are its baseline, and a few thousand are baseline enough.
    by_domain = (
        domain_sessions(layout, stretto.drift_sessions) if store.has_warehouse(layout) else {}
    )
    gathered: dict[str, int] = {}
    for domain in sorted(by_domain.keys() - served_paths.keys()):
        with timings.phase(f"facts of {domain}"):  # no flow served: its facts, for the first
            gathered[domain] = gather_facts(  # check under one
                by_domain[domain], drift_cache(layout, domain), read_episode
            )
        context.log.info(f"facts of {domain}: {gathered[domain]} log(s) read (no flow served)")
    for domain, path in sorted(served_paths.items()):
        try:
            served = load_flow(path)
        except FlowError as exc:
            per_domain[domain] = {"error": str(exc)}
            continue
        sessions = by_domain.get(domain, [])
        if not sessions:
            continue
        with timings.phase(f"drift of {domain}"):
            outcome = cached_drift(served, sessions, drift_cache(layout, domain), read_episode)
        result = outcome.result
        with timings.phase(f"the {domain} report"):
            folder = Paths.at(layout.home).report_folder(domain, "drift")
            write_report(result, folder)
        per_domain[domain] = {
            "sounding": result.sounding,
            "sessions": len(result.sessions),
            "scored": outcome.scored,
            "logs read": outcome.read,
            "alarms": len(result.alarms),
            "change": result.sessions[-1]["change"],
            "report": str(folder / "drift.md"),
        }
        context.log.info(
            f"drift of {domain}: {outcome.scored} session(s) scored ({outcome.read} log(s) read), "
            f"{outcome.cached} from the cache"
        )
    sounding = sorted(d for d, r in per_domain.items() if r.get("sounding") or "error" in r)
    return dg.AssetCheckResult(
        passed=not sounding,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"drift sounds for {', '.join(sounding)}: relearn with `stretto stage` and review"
            if sounding
            else f"no drift in {len(per_domain)} served flow(s)"
        ),
        metadata={
            "domains": dg.MetadataValue.json(per_domain),
            "facts gathered (logs read)": dg.MetadataValue.json(gathered),
            **timings.metadata(),
        },
    )


class StageConfig(dg.Config):
    window: int = 50  # the sessions scored and reported, the newest
    half_life: float | None = None  # sessions: older ones count less in the habit
    auto_commit_if_better: bool = False  # commit when used − detours improved (interval > 0)


@dg.asset(
    group_name="learning",
    deps=[steps],
    description="The staged flows: flows/DOMAIN.staged.flow.json relearned beside each "
    "served flow from the domain's sessions, each new session scored by the served flow and by "
    "the staged flow as it was before it (flows/DOMAIN.stage.json). Committing stays a "
    "person's decision (`stretto flow-commit`) unless auto_commit_if_better.",
)
def staged_flow(
    context: dg.AssetExecutionContext, config: StageConfig, stretto: StrettoHome
) -> dg.MaterializeResult:
    layout = stretto.layout()
    if not store.has_warehouse(layout):
        return skipped(context, f"no warehouse at {layout.warehouse} yet")
    reports: dict[str, dict] = {}
    for domain, path in sorted(served_flows(layout).items()):
        learn = learner(layout, domain, only_domain=True, half_life=config.half_life)
        try:
            result = staging.stage(
                path,
                warehouse_episodes(layout, domain),
                learn,
                window=config.window,
                settings={"half_life": config.half_life} if config.half_life else None,
            )
        except (ValueError, LearnError, FlowError) as exc:
            raise dg.Failure(f"staging the {domain} flow: {exc}", allow_retries=False) from None
        totals = result.totals()
        report = {
            "staged": str(result.staged_path),
            "sessions": totals["sessions"],
            "scored now": result.scored_now,
            "better": totals["better"],
            "needs review": result.review,
            "committed": None,
        }
        if config.auto_commit_if_better:
            entry = staging.commit_if_better(path, result)
            report["committed"] = entry["version"] if entry else None
        reports[domain] = report
        context.log.info(
            f"staged the {domain} flow from {totals['sessions']} scored sessions "
            f"({result.scored_now} new); {len(result.review)} change(s) need review"
        )
    return dg.MaterializeResult(
        metadata={
            "domains": dg.MetadataValue.json(reports),
            "staged": len(reports),
        }
    )
