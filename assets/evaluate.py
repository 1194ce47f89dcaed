"""Asset: other rules evaluated off-policy on exploring flow logs (stretto.offline.evaluate),
with its tables."""

from pathlib import Path

import dagster as dg

from assets.resources import StrettoHome
from stretto.model.decide import DEFAULT_THRESHOLD
from stretto.model.flow import load_flow
from stretto.offline import evaluate as ev


class EvaluationConfig(dg.Config):
    sessions: str  # a folder of session logs with their flow logs (made with --flow-explore)
    deciders: list[str] = []  # target deciders, reach and/or habit; empty: the logs' own
    thresholds: list[float] = [DEFAULT_THRESHOLD]  # target thresholds
    flow: str | None = None  # the flow served: tool kinds, and the report's domain
    out: str | None = None  # the tables' folder (default HOME/reports/<domain>/evaluation-<time>)
    min_ess: float = ev.DEFAULT_MIN_ESS
    switch_tau: float = ev.DEFAULT_SWITCH_TAU
    bootstrap: int = ev.DEFAULT_BOOTSTRAP
    seed: int = 0


@dg.asset(
    group_name="learning",
    description="Other rules (decider × threshold) evaluated off-policy on exploring flow logs: "
    "lookups, used, detours and turns saved by the labels, the direct method, IPS, SNIPS, DR, "
    "SNDR and Switch-DR, with intervals and weight diagnostics.",
)
def evaluation(
    context: dg.AssetExecutionContext, config: EvaluationConfig, stretto: StrettoHome
) -> dg.MaterializeResult:
    flow = load_flow(config.flow) if config.flow else None
    kinds = flow["manifest"]["tools"] if flow else None
    labelled = ev.label_folder(config.sessions, kinds, progress=stretto.progress)
    for warning in labelled.warnings:
        context.log.warning(warning)
    targets = ev.targets(labelled, config.deciders, config.thresholds)
    results = ev.evaluate(
        labelled,
        targets,
        min_ess=config.min_ess,
        switch_tau=config.switch_tau,
        bootstrap=config.bootstrap,
        seed=config.seed,
    )
    domain = flow["manifest"]["domain"] if flow else labelled.domain
    folder = (
        Path(config.out) if config.out else stretto.layout().report_folder(domain, "evaluation")
    )
    ev.write_tables(labelled, results, folder)
    context.log.info(f"evaluation of {config.sessions}: {folder}")
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
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(ev.markdown(results)),
            "sessions": labelled.sessions,
            "decisions": len(labelled.rows),
            "explored": labelled.explored,
            "targets": ", ".join(r["target"]["name"] for r in results),
            "tables": dg.MetadataValue.path(str(folder)),
            "totals": dg.MetadataValue.table(
                records=[
                    dg.TableRecord({k: v for k, v in row.items() if v is not None})
                    for row in totals
                ],
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
