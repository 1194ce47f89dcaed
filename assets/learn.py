"""Assets: each (domain, day)'s counts, and each domain's flow, the sum of its days' counts
(with an arbiter when an oracle or an arbiter file is configured).

Thin: the flow is learned by assets/relearn.py (the warehouse's habit, the offline arbiter and
gate) and put in place, served or staged, by stretto.offline.lifecycle.stage.place_relearned;
here the config becomes their plain options and their results become Dagster's metadata and
checks."""

import time
from pathlib import Path

import dagster as dg

from assets.ingest import nothing_to_check, steps
from assets.metadata import Timings, link, skipped, table
from assets.partitions import ALL_DAYS_OF_DOMAIN, domain_day_key, domain_days, domains, split_key
from assets.relearn import ArbiterFailed, ArbiterPlan, GatePlan, learn_domain_flow
from assets.resources import StrettoHome
from stretto.logs.rewards import read_rewards
from stretto.model.defaults import SURPRISE_WINDOW
from stretto.model.flow import load_manifest
from stretto.offline.fits.gate import GateError
from stretto.offline.fits.learn_arbiter import ArbiterOptions
from stretto.offline.lifecycle.flowdiff import diff_markdown
from stretto.offline.lifecycle.stage import place_relearned
from warehouse import store
from warehouse.counts.learn import HabitOptions, LearnError, learn_flow
from warehouse.layout import Layout

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

    def habit(self) -> HabitOptions:
        """How the habit is learned: the partition's domain (or with `domain`, every session)."""
        return HabitOptions(
            manifest=load_manifest(self.manifest) if self.manifest else None,
            only_domain=not self.domain,
            with_constants=self.constants,
            rewards=read_rewards(self.rewards) if self.rewards else None,
            half_life=self.half_life,
            otel=self.otel,
        )

    def arbiter(self, layout: Layout) -> ArbiterPlan | None:
        """Where the arbiter comes from, if the flow has one."""
        if not (self.oracle or self.arbiter_from):
            return None
        fit = ArbiterOptions(
            oracle=self.oracle or "",
            cache=self.oracle_cache or layout.home / "oracle-cache",
            base_url=self.oracle_base_url,
            budget=self.oracle_budget,
            price=self.oracle_price,
            log=self.oracle_log,
            predicates=self.predicates,
            manifest_options=self.manifest_options,
            dataflow_hints=self.dataflow_hints,
            pooled=self.pooled_arbiter,
        )
        return ArbiterPlan(fit, self.arbiter_from, self.held_out_tasks, self.refit_habit)

    def gate(self) -> GatePlan | None:
        return None if self.surprise is None else GatePlan(self.surprise, self.surprise_window)


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


def counts_reported(layout: Layout, domain: str, since_ns: int):
    """The `counts` partitions the flow counted (a relearn counts the days whose sessions
    changed and reads the others back): each (domain, day) whose counts were written since
    `since_ns`, materialized, so `counts` shows what the flows are the sum of."""
    root = layout.warehouse / "counts" / domain
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        written = [f for f in folder.glob("*.counts-*.json") if f.stat().st_mtime_ns >= since_ns]
        if written:
            yield dg.AssetMaterialization(
                asset_key=counts.key,
                partition=str(domain_day_key(domain, folder.name)),
                description=f"counted by the {domain} flow's relearn",
                metadata={"counts": link(written[0])},
            )


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
        partitions_def=domains,  # a result is the domain's, not whichever domain ran last
        description="The learned flow passes its JSON Schema and the loader's checks; blocking: "
        "a flow that does not is never served.",
    ),
    dg.AssetCheckSpec(
        "flow_diff_against_served",
        asset="flow",
        blocking=True,
        partitions_def=domains,
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
    habit = config.habit()
    timings = Timings(context.log.info)
    since = time.time_ns()
    try:
        with timings.phase("learning"):
            learned = learn_domain_flow(
                layout,
                domain,
                habit,
                config.arbiter(layout),
                config.gate(),
                say=context.log.info,
                warn=context.log.warning,
            )
    except (LearnError, store.NoWarehouse) as exc:
        if config.domain:  # asked for this flow (stretto learn): not having it is a failure
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        yield skipped(context, str(exc))
        yield from nothing_to_check(FLOW_CHECKS, str(exc))
        return
    except ArbiterFailed as exc:
        raise dg.Failure(str(exc)) from None
    except GateError as exc:  # too few or too short sessions: say so, no traceback
        raise dg.Failure(description=f"the surprise gate: {exc}", allow_retries=False) from None
    yield from counts_reported(layout, domain, since)
    served = layout.flow(domain)
    placed = place_relearned(
        learned,
        served,
        Path(config.out) if config.out else None,
        note=f"relearned by run {context.run.run_id}",
    )
    path, candidate, serving, review = placed.path, placed.candidate, placed.serving, placed.review
    changes = dg.MetadataValue.md(diff_markdown(review, placed.other))
    sessions = learned["provenance"]["habit_episodes"]
    for note in placed.notes:
        context.log.warning(note)
    if placed.staged:
        context.log.warning(
            f"the {domain} flow learned from {sessions} sessions is staged at {candidate}, not "
            f"served ({placed.why if placed.valid else placed.why_valid}); review it (`stretto "
            f"flow-diff {served} {candidate}`) and serve it with `stretto flow-commit {served}`"
        )
    else:
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
        passed=placed.valid,
        description=placed.why_valid,
        metadata={"flow": link(candidate if serving and not placed.valid else path)},
    )
    yield dg.AssetCheckResult(
        check_name="flow_diff_against_served",
        passed=not review,
        # blocking only where it guards the served flow
        severity=dg.AssetCheckSeverity.ERROR if serving else dg.AssetCheckSeverity.WARN,
        description=placed.why,
        metadata={
            "needs review": len(review),
            "changes": changes,
            **({"staged": link(candidate)} if serving and review else {}),
        },
    )


def _arbiter_summary(flow: dict) -> dict:
    arbiter = flow["arbiter"]
    return {
        "model": arbiter["model"],
        "cases": arbiter["cases"],
        "tasks": arbiter["tasks"],
        "folds": len(arbiter["folds"]),
        "sources": arbiter["sources"],
    }
