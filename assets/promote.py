"""Asset: a flow promoted from shadow-mode sessions (stretto.offline.lifecycle.promote),
with its report."""

from pathlib import Path

import dagster as dg

from assets.learn import flow as flow_asset
from assets.metadata import link, skipped
from assets.partitions import domains
from assets.reports import AFTER_EACH_FLOW, missing, served_flow
from assets.resources import StrettoHome
from stretto.home import private_dirs
from stretto.offline.lifecycle.promote import Bar, promote_flow, promoted_sites, rows


class PromotionConfig(dg.Config):
    """Empty: the domain's served flow, scored on HOME/shadow/DOMAIN/, the promoted flow
    written for review to reports/DOMAIN/promotion-TIME/ (never over the served flow)."""

    flow: str | None = None  # the flow file
    shadow: str | None = None  # session logs recorded in shadow mode (or without a flow)
    decider: str | None = None  # reach or habit; default: as served (reach if the flow has it)
    threshold: float | None = None  # None: the flow's own (learn --calibrate), else 0.3
    min_used: float = 0.7
    min_lower: float = 0.5
    min_tasks: int = 3
    out: str | None = None  # where to write the promoted flow


@dg.asset(
    group_name="reports",
    deps=[flow_asset],
    partitions_def=domains,
    output_required=False,
    automation_condition=AFTER_EACH_FLOW,
    description="A flow's sites promoted from shadow-mode sessions: scored as served, a site "
    "is promoted when the agent later made enough of the lookups the flow would make there "
    "(used share, its 90% Wilson lower bound, distinct tasks). Writes the flow with its "
    "`promoted` record, for review under reports/DOMAIN/.",
)
def promotion(context: dg.AssetExecutionContext, config: PromotionConfig, stretto: StrettoHome):
    layout = stretto.layout()
    domain = context.partition_key
    path = served_flow(layout, domain, config.flow)
    shadow = Path(config.shadow) if config.shadow else layout.shadow / domain
    reason = missing({"flow": path, "shadow-mode sessions": shadow})
    if reason:
        yield skipped(context, reason)
        return
    out = (
        Path(config.out)
        if config.out
        else layout.report_folder(domain, "promotion") / f"{domain}.promoted.flow.json"
    )
    private_dirs(out.parent, own=not config.out)
    bar = Bar(config.threshold, config.min_used, config.min_lower, config.min_tasks)
    try:
        done = promote_flow(path, shadow, bar, decider=config.decider, out=out, cli=False)
    except (OSError, ValueError) as exc:  # bad config, flow or logs: the message names it
        raise dg.Failure(description=f"promotion: {exc}") from exc
    for warning in done.warnings:
        context.log.warning(warning)
    record = done.promotion.record
    promoted = sorted(promoted_sites(record))
    context.log.info(f"promoted {len(promoted)} of {len(record['sites'])} sites; wrote {done.out}")
    yield dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(done.report),
            "flow": link(Path(done.out)),
            "decider": done.promotion.decider,
            "sessions": done.promotion.scored.sessions,
            "rounds": done.promotion.rounds,
            "promoted": len(promoted),
            "promoted sites": ", ".join(promoted) or "none",
            "sites": dg.MetadataValue.table(
                records=[
                    dg.TableRecord(
                        {
                            "site": r["site"],
                            "decisions": r["decisions"],
                            "lookups": r["lookups"],
                            "used": r["used"],
                            "lower": r["lower"],
                            "tasks": r["tasks"],
                            "promoted": r["promoted"],
                        }
                    )
                    for r in rows(record)
                ],
                schema=dg.TableSchema(
                    columns=[
                        dg.TableColumn("site", "string"),
                        dg.TableColumn("decisions", "int"),
                        dg.TableColumn("lookups", "int"),
                        dg.TableColumn("used", "int"),
                        dg.TableColumn("lower", "float"),
                        dg.TableColumn("tasks", "int"),
                        dg.TableColumn("promoted", "bool"),
                    ]
                ),
            ),
        }
    )
