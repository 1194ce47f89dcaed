"""Asset: a flow audited on sessions it never saw (stretto.offline.audit), with its tables and
plot."""

import base64

import dagster as dg

from assets.resources import StrettoHome
from stretto.logs.episode import read_episodes
from stretto.model.flow import load_flow
from stretto.offline.audit import audit as run_audit
from stretto.offline.audit import markdown, write_tables


def _number(value: float | None) -> dg.MetadataValue:
    return dg.MetadataValue.null() if value is None else dg.MetadataValue.float(value)


class AuditConfig(dg.Config):
    flow: str  # the flow file
    sessions: str  # a folder of session logs the flow did not learn from
    decider: str = "habit"


@dg.asset(
    group_name="learning",
    description="A flow audited on held-out sessions: "
    "agreement, nats per decision, and the served score's calibration (ECE, Brier).",
)
def audit(
    context: dg.AssetExecutionContext, config: AuditConfig, stretto: StrettoHome
) -> dg.MaterializeResult:
    flow = load_flow(config.flow)
    result = run_audit(flow, read_episodes(config.sessions), config.decider)
    folder = stretto.layout().report_folder(flow["manifest"]["domain"], "audit")
    write_tables(result, folder)
    plot = base64.b64encode((folder / "reliability.png").read_bytes()).decode()
    totals = result.totals()
    context.log.info(f"audit of {config.flow}: {folder}")
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(markdown(result)),
            "reliability": dg.MetadataValue.md(f"![reliability](data:image/png;base64,{plot})"),
            "agreement": totals["agreement"],
            "nats per decision": totals["nats_per_decision"],
            # null when no lookup was served; ECE over the spec's bins (stretto.offline.calibration)
            "ece": _number(totals["ece"]),
            "brier": _number(totals["brier"]),
            "auc": _number(totals["auc"]),
            "tables": dg.MetadataValue.path(str(folder)),
            "sites": dg.MetadataValue.table(
                records=[dg.TableRecord(row) for row in result.sites()],
                schema=dg.TableSchema(
                    columns=[
                        dg.TableColumn("site", "string"),
                        dg.TableColumn("decisions", "int"),
                        dg.TableColumn("agreement", "float"),
                        dg.TableColumn("nats_per_decision", "float"),
                    ]
                ),
            ),
        }
    )
