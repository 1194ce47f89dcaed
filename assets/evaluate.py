"""Asset: other rules evaluated off-policy on exploring flow logs (stretto.offline.evaluate),
with its tables."""

from pathlib import Path

import dagster as dg

from assets.learn import flow as flow_asset
from assets.metadata import link, skipped
from assets.partitions import domains
from assets.reports import AFTER_EACH_FLOW, missing
from assets.resources import StrettoHome
from stretto.model.decide import DEFAULT_THRESHOLD, served_threshold
from stretto.model.flow import load_flow
from stretto.offline import evaluate as ev


class EvaluationConfig(dg.Config):
    """Empty: the sessions recorded serving the domain's flow exploring (HOME/explore/DOMAIN/),
    with the served flow's tool kinds."""

    sessions: str | None = None  # session logs with their flow logs (made with --flow-explore)
    deciders: list[str] = []  # target deciders, reach and/or habit; empty: the logs' own
    thresholds: list[float] = []  # target thresholds (none: the flow's own, else 0.3)
    flow: str | None = None  # the flow served: tool kinds, and the report's domain
    out: str | None = None  # the tables' folder (default HOME/reports/<domain>/evaluation-<time>)
    # (`flow` default: the served flow, when there is one)
    min_ess: float = ev.DEFAULT_MIN_ESS
    switch_tau: float = ev.DEFAULT_SWITCH_TAU
    bootstrap: int = ev.DEFAULT_BOOTSTRAP
    seed: int = 0


@dg.asset(
    group_name="reports",
    deps=[flow_asset],
    partitions_def=domains,
    output_required=False,
    automation_condition=AFTER_EACH_FLOW,
    description="Other rules (decider × threshold) evaluated off-policy on exploring flow logs: "
    "lookups, used, detours and turns saved by the labels, the direct method, IPS, SNIPS, DR, "
    "SNDR and Switch-DR, with intervals and weight diagnostics.",
)
def evaluation(context: dg.AssetExecutionContext, config: EvaluationConfig, stretto: StrettoHome):
    layout = stretto.layout()
    domain = context.partition_key
    sessions = Path(config.sessions) if config.sessions else layout.explore / domain
    reason = missing({"exploring sessions": sessions})
    if reason:
        yield skipped(context, reason)
        return
    served = layout.flow(domain)
    flow_file = config.flow or (str(served) if served.exists() else None)
    flow = load_flow(flow_file) if flow_file else None
    kinds = flow["manifest"]["tools"] if flow else None
    labelled = ev.label_folder(str(sessions), kinds, progress=stretto.progress)
    for warning in labelled.warnings:
        context.log.warning(warning)
    own = served_threshold(flow) if flow else DEFAULT_THRESHOLD
    targets = ev.targets(labelled, config.deciders, config.thresholds or [own])
    results = ev.evaluate(
        labelled,
        targets,
        min_ess=config.min_ess,
        switch_tau=config.switch_tau,
        bootstrap=config.bootstrap,
        seed=config.seed,
    )
    folder = Path(config.out) if config.out else layout.report_folder(domain, "evaluation")
    ev.write_tables(labelled, results, folder)
    context.log.info(f"evaluation of {sessions}: {folder}")
    totals = []
    for result in results:
        total = result["total"]
        for name in ev.ESTIMATORS:
            value = total[name]
            totals.append(
                {
                    "target": result["target"]["name"],
                    "estimator": name,
                    **{m: None if value is None else value[m] for m in ev.METRICS},
                }
            )
    yield dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(ev.markdown(results)),
            "sessions": labelled.sessions,
            "decisions": len(labelled.rows),
            "explored": labelled.explored,
            "targets": ", ".join(r["target"]["name"] for r in results),
            "tables": link(folder),
            "totals": dg.MetadataValue.table(
                # every record with every column (Dagster's table requires it); None where an
                # estimator had no value
                records=[dg.TableRecord(row) for row in totals],
                schema=dg.TableSchema(
                    columns=[
                        dg.TableColumn("target", "string"),
                        dg.TableColumn("estimator", "string"),
                        *(dg.TableColumn(m, "float") for m in ev.METRICS),
                    ]
                ),
            ),
        }
    )
