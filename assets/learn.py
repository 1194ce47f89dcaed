"""Assets: each (domain, day)'s counts, and each domain's flow, the sum of its days' counts
(with an arbiter when an oracle or an arbiter file is configured)."""

import json
from collections.abc import Callable
from pathlib import Path

import dagster as dg

from assets.ingest import nothing_to_check, steps
from assets.metadata import Timings, link, skipped, table
from assets.partitions import ALL_DAYS_OF_DOMAIN, domain_days, domains, split_key
from assets.resources import StrettoHome
from stretto.home import private_dirs
from stretto.logs.episode import Episode, in_start_order, read_episode
from stretto.logs.rewards import read_rewards, with_rewards
from stretto.model.defaults import SURPRISE_WINDOW
from stretto.model.flow import FlowError, load_flow, load_manifest, write_flow
from stretto.offline.flowdiff import diff, diff_markdown
from stretto.offline.stage import mark_staged
from stretto.offline.versions import staged_path
from warehouse import store
from warehouse.layout import Layout
from warehouse.learn import LearnError, learn_flow

GROUP = "learning"


class FlowConfig(dg.Config):
    """Empty: the partition's domain, from the sessions whose log names it, written to
    flows/DOMAIN.flow.json. With `domain` (the partition's): from every session, whatever
    domain its log names (what `stretto learn --domain` does), written to `out` if given."""

    domain: str | None = None
    manifest: str | None = None  # a tool manifest file instead of the logs' tool lists
    out: str | None = None
    constants: bool = False  # learn arguments the agent always passes the same way
    half_life: float | None = None  # sessions: older ones count less in the habit
    rewards: str | None = None  # a rewards file (session -> reward), winning over the logs'
    surprise: float | None = None  # learn a surprise gate at this quantile
    surprise_window: int = SURPRISE_WINDOW
    otel: bool = False  # the logs were converted from an OpenTelemetry export
    # The arbiter (docs/oracle.md): fitted on held-out sessions with `oracle`, or taken from
    # `arbiter_from`; none when both are unset (a habit-only flow).
    oracle: str | None = None
    oracle_cache: str | None = None  # default: <home>/oracle-cache
    oracle_base_url: str | None = None
    oracle_budget: float = 1.0
    oracle_price: str | None = None
    oracle_log: str | None = None
    predicates: str | None = None
    manifest_options: bool = False
    dataflow_hints: bool = False
    pooled_arbiter: bool = True
    refit_habit: bool = False
    arbiter_from: str | None = None
    # the tasks held out for the arbiter (compile: the split's test tasks); default: 30% of
    # the tasks, by stretto.oracle.split.learn_split
    held_out_tasks: list[str] | None = None


def flow_path(home: Path, domain: str) -> Path:
    """The served flow of a domain."""
    return home / "flows" / f"{domain}.flow.json"


def learner(
    layout: Layout,
    domain: str,
    *,
    manifest: dict | None = None,
    only_domain: bool = False,
    with_constants: bool = False,
    rewards: dict[str, float] | None = None,
    half_life: float | None = None,
) -> Callable[[list[Episode]], dict]:
    """episodes -> the habit-only flow learned from those of the warehouse's sessions (a fold
    of the surprise gate's or the calibration's, the sessions before one being staged), as
    the flow asset learns, with no pipeline run (no flow file is written)."""

    def learn(episodes: list[Episode]) -> dict:
        learned = learn_flow(
            layout,
            domain,
            manifest=manifest,
            only_domain=only_domain,
            with_constants=with_constants,
            sessions=[e.id for e in episodes],
            rewards=rewards,
            half_life=half_life,
        )
        return with_provenance(learned, half_life)

    return learn


def with_provenance(learned: dict, half_life: float | None, otel: bool = False) -> dict:
    """The learned flow's provenance names the half-life it was weighted with and, for logs
    converted from an OpenTelemetry export, the conventions they were read by."""
    if half_life is not None:
        learned["provenance"]["half_life"] = half_life
    if otel:
        from stretto.logs.otel import CONVENTIONS

        learned["provenance"]["conventions"] = CONVENTIONS
    return learned


def warehouse_episodes(
    layout: Layout, domain: str | None = None, rewards: dict[str, float] | None = None
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


@dg.asset(
    group_name=GROUP,
    deps=[steps],
    partitions_def=domain_days,
    backfill_policy=dg.BackfillPolicy.single_run(),
    output_required=False,
    description="The counts a flow is the sum of, for one domain and day: habit, reach, sites "
    "and the bindings' tallies of the day's sessions (warehouse/counts/DOMAIN/DAY/). "
    "Counted again only when the day's sessions change.",
)
def counts(context: dg.AssetExecutionContext, stretto: StrettoHome):
    layout = stretto.layout()
    if not store.has_warehouse(layout):
        yield skipped(context, f"no warehouse at {layout.warehouse} yet")
        return
    by_domain: dict[str, set[str]] = {}
    for key in context.partition_keys:
        domain, day = split_key(key)
        by_domain.setdefault(domain, set()).add(day)
    timings = Timings(context.log.info)
    for domain, days in sorted(by_domain.items()):
        with timings.phase(f"counting {domain}"):
            learn_flow(layout, domain, only_domain=True, only_days=days, say=context.log.info)
    yield dg.MaterializeResult(
        metadata={
            "parts": len(context.partition_keys),
            "counts": link(layout.warehouse / "counts"),
            **timings.metadata(),
        }
    )


def _extras(layout, domain, only_domain, config, manifest, rewards, learned: dict) -> None:
    """What `learn`'s options add to a learned flow: the surprise gate (learned by
    cross-fitting on the same sessions), the half-life and the OpenTelemetry conventions
    in its provenance."""
    with_provenance(learned, config.half_life, config.otel)
    if config.surprise is not None:
        from stretto.offline.gate import GateError, learn_gate

        learn = learner(
            layout,
            domain,
            manifest=manifest,
            only_domain=only_domain,
            rewards=rewards,
            half_life=config.half_life,
        )
        episodes = warehouse_episodes(layout, domain if only_domain else None, rewards)
        try:
            gate = learn_gate(episodes, learn, config.surprise, config.surprise_window)
        except GateError as exc:  # too few or too short sessions: say so, no traceback
            raise dg.Failure(description=f"the surprise gate: {exc}", allow_retries=False) from None
        learned["surprise"] = gate


def sites_table(flow: dict) -> dg.MetadataValue:
    """The flow's sites and the lookups it may make at each, as a table."""
    rows = [
        {
            "site": s["after"] + (" (error)" if s["failed"] else ""),
            "lookup": tool,
            "seen": n,
        }
        for s in flow["sites"]["next"]
        for tool, n in sorted(s["lookups"].items())
    ]
    return table(rows, {"site": "string", "lookup": "string", "seen": "int"})


FLOW_CHECKS = [
    dg.AssetCheckSpec(
        "flow_validates",
        asset="flow",
        blocking=True,
        description="The learned flow passes its JSON Schema and the loader's checks; blocking: "
        "a flow that does not is never served.",
    ),
    dg.AssetCheckSpec(
        "flow_diff_against_served",
        asset="flow",
        blocking=True,
        description="What the relearned flow can do that the served flow could not (a new tool, "
        "lookup or binding source): blocking. When something needs review the served flow "
        "stays as it was, the relearned one is staged beside it "
        "(`flows/DOMAIN.staged.flow.json`, for `stretto flow-commit` after review) and the run "
        "fails, listing why; with `out` (nothing served changes) it only warns.",
    ),
]


@dg.asset(
    group_name=GROUP,
    deps=[dg.AssetDep(counts, partition_mapping=ALL_DAYS_OF_DOMAIN)],
    partitions_def=domains,
    output_required=False,
    check_specs=FLOW_CHECKS,
    description="The domain's served flow, `flows/DOMAIN.flow.json`, learned from its current "
    "sessions (the sum of its days' counts). Learned first as a candidate beside it "
    "(`flows/DOMAIN.staged.flow.json`), served only when its two blocking checks pass; a "
    "change that needs review stays staged (the console's Staged section shows it).",
)
def flow(context: dg.AssetExecutionContext, config: FlowConfig, stretto: StrettoHome):
    layout = stretto.layout()
    domain = context.partition_key
    if config.domain and config.domain != domain:
        raise dg.Failure(f"`domain` is {config.domain!r} but the partition is {domain!r}")
    if not store.has_warehouse(layout):
        reason = f"no warehouse at {layout.warehouse} yet"
        yield skipped(context, reason)
        yield from nothing_to_check(FLOW_CHECKS, reason)
        return
    manifest = load_manifest(config.manifest) if config.manifest else None
    rewards = read_rewards(config.rewards) if config.rewards else None
    only_domain = not config.domain
    timings = Timings(context.log.info)
    try:
        with timings.phase("learning"):
            if config.oracle or config.arbiter_from:
                learned = learn_with_arbiter(
                    layout, domain, config, manifest, only_domain, context, rewards
                )
            else:
                learned = learn_flow(
                    layout,
                    domain,
                    manifest=manifest,
                    only_domain=only_domain,
                    with_constants=config.constants,
                    rewards=rewards,
                    half_life=config.half_life,
                    say=context.log.info,
                    warn=context.log.warning,  # logs that could not be merged
                )
            _extras(layout, domain, only_domain, config, manifest, rewards, learned)
    except (LearnError, store.NoWarehouse) as exc:
        if config.domain:  # asked for this flow (stretto learn): not having it is a failure
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        yield skipped(context, str(exc))
        yield from nothing_to_check(FLOW_CHECKS, str(exc))
        return
    served = flow_path(layout.home, domain)
    path = Path(config.out) if config.out else served
    # Serving: the flow is learned into a candidate beside the served one and replaces it only
    # when the blocking checks pass. With another `out`, nothing served changes: written there.
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
    changes = dg.MetadataValue.md(diff_markdown(review, other))
    sessions = learned["provenance"]["habit_episodes"]
    if serving and not (valid and not review):
        try:
            mark_staged(served, by="relearn")
        except ValueError as exc:  # its scores file cannot be read: say so, the flow is staged
            context.log.warning(str(exc))
        context.log.warning(
            f"the {domain} flow learned from {sessions} sessions is staged at {candidate}, not "
            f"served ({why if valid else why_valid}); review it (`stretto flow-diff {served} "
            f"{candidate}`) and serve it with `stretto flow-commit {served}`"
        )
    else:
        if serving:
            serve(candidate, served, f"relearned by run {context.run.run_id}: {why}")
        context.log.info(f"learned the {domain} flow from {sessions} sessions: {path}")
        yield dg.MaterializeResult(
            metadata={
                "flow": link(path),
                "sessions": sessions,
                "steps": learned["provenance"]["steps"],
                "tools": len(learned["manifest"]["tools"]),
                "sites": len(learned["sites"]["next"]),
                "alpha": learned["habit"]["alpha"],
                **(
                    {"surprise": dg.MetadataValue.json(learned["surprise"])}
                    if "surprise" in learned
                    else {}
                ),
                "sites and lookups": sites_table(learned),
                **(
                    {"arbiter": dg.MetadataValue.json(_arbiter_summary(learned))}
                    if "arbiter" in learned
                    else {}
                ),
                "changes": changes,
                **timings.metadata(),
            }
        )
    yield dg.AssetCheckResult(
        check_name="flow_validates",
        passed=valid,
        description=why_valid,
        metadata={"flow": link(candidate if serving and not valid else path)},
    )
    yield dg.AssetCheckResult(
        check_name="flow_diff_against_served",
        passed=not review,
        # blocking only where it guards the served flow
        severity=dg.AssetCheckSeverity.ERROR if serving else dg.AssetCheckSeverity.WARN,
        description=why,
        metadata={
            "needs review": len(review),
            "changes": changes,
            **({"staged": link(candidate)} if serving and review else {}),
        },
    )


def serve(candidate: Path, served: Path, note: str) -> None:
    """The candidate becomes the served flow, replaced whole (nothing is staged beside it
    after): committed as the next version when the served flow has a history (`stretto
    flow-commit`), else renamed over it."""
    from stretto.offline import versions

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


def _arbiter_summary(flow: dict) -> dict:
    arbiter = flow["arbiter"]
    return {
        "model": arbiter["model"],
        "cases": arbiter["cases"],
        "tasks": arbiter["tasks"],
        "folds": len(arbiter["folds"]),
        "sources": arbiter["sources"],
    }


def _sessions_by_task(layout: Layout, domain: str, only_domain: bool) -> list[tuple[str, str, str]]:
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


def learn_with_arbiter(
    layout: Layout,
    domain: str,
    config: FlowConfig,
    manifest: dict | None,
    only_domain: bool,
    context: dg.AssetExecutionContext,
    rewards: dict[str, float] | None = None,
) -> dict:
    """The arbiter step (../shared/spec/algorithms.md §7 steps 3 and 6): with `arbiter_from`,
    the habit from every session and the arbiter taken; else 30% of the tasks held out
    (stretto.oracle.split.learn_split), the habit learned from the others, the arbiter fitted
    on the held-out sessions' decisions (stretto.offline.learn_arbiter), and with
    `refit_habit` the habit learned again from every session."""
    from stretto.offline.learn_arbiter import ArbiterOptions, learn_arbiter
    from stretto.oracle.arbiter import take_arbiter
    from stretto.oracle.errors import OracleError
    from stretto.oracle.split import learn_split

    def habit(sessions: set[str] | None) -> dict:
        return learn_flow(
            layout,
            domain,
            manifest=manifest,
            only_domain=only_domain,
            with_constants=config.constants,
            sessions=sessions,
            rewards=rewards,
            half_life=config.half_life,
        )

    if config.arbiter_from:
        source = Path(config.arbiter_from)
        try:
            taken = take_arbiter(json.loads(source.read_text()), str(source))
        except OSError as exc:
            raise dg.Failure(f"{source}: cannot read: {exc.strerror or exc}") from None
        except ValueError as exc:  # not JSON, or not an arbiter (ArbiterError names the field)
            raise dg.Failure(str(exc) if "field" in str(exc) else f"{source}: {exc}") from None
        learned = habit(None)
        learned["arbiter"] = taken.to_json()
        return learned
    sessions = _sessions_by_task(layout, domain, only_domain)
    tasks = [task for _, task, _ in sessions]
    if config.held_out_tasks is not None:
        held_tasks = set(config.held_out_tasks) & set(tasks)
        train_tasks = set(tasks) - held_tasks
    else:
        try:
            training, held_out = learn_split(tasks)
        except ValueError as exc:
            raise dg.Failure(f"the {domain} arbiter: {exc}") from None
        train_tasks, held_tasks = set(training), set(held_out)
    learned = habit({s for s, task, _ in sessions if task in train_tasks})
    episodes = [read_episode(file) for _, task, file in sessions if task in held_tasks]
    options = ArbiterOptions(
        oracle=config.oracle or "",
        cache=config.oracle_cache or layout.home / "oracle-cache",
        base_url=config.oracle_base_url,
        budget=config.oracle_budget,
        price=config.oracle_price,
        log=config.oracle_log,
        predicates=config.predicates,
        manifest_options=config.manifest_options,
        dataflow_hints=config.dataflow_hints,
        pooled=config.pooled_arbiter,
    )
    try:
        fitted = learn_arbiter(learned, episodes, options)
    except (OracleError, ValueError) as exc:  # the budget, a runner's failure, nothing to fit
        raise dg.Failure(f"the {domain} arbiter: {exc}") from None
    for note in fitted.notes:
        context.log.warning(note)
    context.log.info(
        f"fitted the {domain} arbiter on {fitted.arbiter.cases} decisions of {fitted.tasks} "
        f"held-out tasks ({fitted.estimate.uncached} of {fitted.estimate.questions} question "
        f"sets asked of {fitted.arbiter.model}, the rest from the cache)"
    )
    if config.refit_habit:
        learned = habit(None)
    learned["arbiter"] = fitted.arbiter.to_json()
    return learned
