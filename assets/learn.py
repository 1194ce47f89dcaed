"""Assets: each (domain, day)'s counts, and each domain's flow, the sum of its days' counts."""

from pathlib import Path

import dagster as dg

from assets.ingest import nothing_to_check, steps
from assets.metadata import Timings, link, skipped, table
from assets.partitions import ALL_DAYS_OF_DOMAIN, domain_days, domains, split_key
from assets.resources import StrettoHome
from stretto.model.flow import FlowError, load_flow, load_manifest, validate, write_flow
from stretto.offline.review import diff
from warehouse import store
from warehouse.learn import LearnError, learn_flow

GROUP = "learning"


class FlowConfig(dg.Config):
    """Empty: the partition's domain, from the sessions whose log names it, written to
    flows/<domain>.flow.json. With `domain` (the partition's): from every session, whatever
    domain its log names (what `stretto learn --domain` does), written to `out` if given."""

    domain: str | None = None
    manifest: str | None = None  # a tool manifest file instead of the logs' tool lists
    out: str | None = None
    constants: bool = False  # learn arguments the agent always passes the same way


def flow_path(home: Path, domain: str) -> Path:
    """The served flow of a domain."""
    return home / "flows" / f"{domain}.flow.json"


@dg.asset(
    group_name=GROUP,
    deps=[steps],
    partitions_def=domain_days,
    backfill_policy=dg.BackfillPolicy.single_run(),
    output_required=False,
    description="The counts a flow is the sum of, for one domain and day: habit, reach, sites "
    "and the bindings' tallies of the day's sessions (warehouse/counts/<domain>/<day>/). "
    "Counted again only when the day's sessions change.",
)
def counts(context: dg.AssetExecutionContext, stretto: StrettoHome):
    layout = stretto.layout()
    if not layout.warehouse.is_dir():
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
        description="the flow file passes its JSON Schema and the loader's checks",
    ),
    dg.AssetCheckSpec(
        "flow_diff_against_served",
        asset="flow",
        description="what the new flow can do that the flow served before could not: needs "
        "review (warns, listing why)",
    ),
]


@dg.asset(
    group_name=GROUP,
    deps=[dg.AssetDep(counts, partition_mapping=ALL_DAYS_OF_DOMAIN)],
    partitions_def=domains,
    output_required=False,
    check_specs=[
        dg.AssetCheckSpec(
            "flow_validates",
            asset="flow",
            description="the flow file passes its JSON Schema and the loader's checks",
        ),
        dg.AssetCheckSpec(
            "flow_diff_against_served",
            asset="flow",
            description="what the "
            "new flow can do that the flow served before could not (needs review)",
        ),
    ],
    description="The domain's flow, flows/<domain>.flow.json (the served flow), learned from "
    "its current sessions: the sum of its days' counts.",
)
def flow(context: dg.AssetExecutionContext, config: FlowConfig, stretto: StrettoHome):
    layout = stretto.layout()
    domain = context.partition_key
    if config.domain and config.domain != domain:
        raise dg.Failure(f"`domain` is {config.domain!r} but the partition is {domain!r}")
    if not layout.warehouse.is_dir():
        reason = f"no warehouse at {layout.warehouse} yet"
        yield skipped(context, reason)
        yield from nothing_to_check(FLOW_CHECKS, reason)
        return
    manifest = load_manifest(config.manifest) if config.manifest else None
    timings = Timings(context.log.info)
    try:
        with timings.phase("learning"):
            learned = learn_flow(
                layout,
                domain,
                manifest=manifest,
                only_domain=not config.domain,
                with_constants=config.constants,
                say=context.log.info,
            )
    except (LearnError, store.NoWarehouse) as exc:
        if config.domain:  # asked for this flow (stretto learn): not having it is a failure
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        yield skipped(context, str(exc))
        yield from nothing_to_check(FLOW_CHECKS, str(exc))
        return
    served = flow_path(layout.home, domain)
    path = Path(config.out) if config.out else served
    before = _readable(served)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_flow(learned, path)
    context.log.info(
        f"learned the {domain} flow from {learned['provenance']['habit_episodes']} sessions: {path}"
    )
    yield dg.MaterializeResult(
        metadata={
            "flow": link(path),
            "sessions": learned["provenance"]["habit_episodes"],
            "steps": learned["provenance"]["steps"],
            "tools": len(learned["manifest"]["tools"]),
            "sites": len(learned["sites"]["next"]),
            "alpha": learned["habit"]["alpha"],
            "sites and lookups": sites_table(learned),
            **timings.metadata(),
        }
    )
    try:
        validate(load_flow(path), str(path))
        valid, why = True, "the flow file validates"
    except (FlowError, OSError, ValueError) as exc:
        valid, why = False, str(exc)
    yield dg.AssetCheckResult(check_name="flow_validates", passed=valid, description=why)
    if before is None:
        review, why = [], f"no flow was served at {served} before"
    else:
        review, _ = diff(before, learned)
        why = ("needs review: " + "; ".join(review)) if review else "nothing needs review"
    yield dg.AssetCheckResult(
        check_name="flow_diff_against_served",
        passed=not review,
        severity=dg.AssetCheckSeverity.WARN,
        description=why,
        metadata={"needs review": len(review)},
    )


def _readable(path: Path) -> dict | None:
    try:
        return load_flow(path)
    except (OSError, ValueError):
        return None
