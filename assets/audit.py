"""Asset: a domain's flow audited on sessions it never saw (stretto.offline.reports.audit), with its
tables and plot."""

from pathlib import Path

import dagster as dg

from assets.learn import flow as flow_asset
from assets.metadata import image, link, skipped
from assets.partitions import domains
from assets.reports import AFTER_EACH_FLOW, missing, served_flow
from assets.resources import StrettoHome
from stretto.logs.merged import read_episodes
from stretto.model.flow import load_flow
from stretto.offline.reports.audit import audit as run_audit
from stretto.offline.reports.audit import markdown, write_tables


def _number(value: float | None) -> dg.MetadataValue:
    return dg.MetadataValue.null() if value is None else dg.MetadataValue.float(value)


class AuditConfig(dg.Config):
    """Empty: the domain's served flow, on the sessions recorded serving it in shadow mode
    (HOME/shadow/DOMAIN/), which it did not learn from."""

    flow: str | None = None  # the flow file
    sessions: str | None = None  # a folder of session logs the flow did not learn from
    decider: str = "habit"


@dg.asset(
    group_name="reports",
    deps=[flow_asset],
    partitions_def=domains,
    output_required=False,
    automation_condition=AFTER_EACH_FLOW,
    description="The domain's flow audited on held-out sessions (default: shadow/DOMAIN/): "
    "agreement, nats per decision, and the served score's calibration (ECE, Brier).",
)
def audit(context: dg.AssetExecutionContext, config: AuditConfig, stretto: StrettoHome):
    layout = stretto.layout()
    domain = context.partition_key
    path = served_flow(layout, domain, config.flow)
    sessions = Path(config.sessions) if config.sessions else layout.shadow / domain
    reason = missing({"flow": path, "held-out sessions": sessions})
    if reason:
        yield skipped(context, reason)
        return
    flow = load_flow(path)
    result = run_audit(flow, read_episodes(sessions), config.decider)
    folder = layout.report_folder(domain, "audit")
    write_tables(result, folder)
    totals = result.totals()
    context.log.info(f"audit of {path} on {sessions}: {folder}")
    yield dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(markdown(result)),
            "reliability": image(folder / "reliability.png", "reliability"),
            "agreement": totals["agreement"],
            "nats per decision": totals["nats_per_decision"],
            # null when no lookup was served; ECE over the spec's bins
            # (stretto.offline.reports.reliability)
            "ece": _number(totals["ece"]),
            "brier": _number(totals["brier"]),
            "auc": _number(totals["auc"]),
            "tables": link(folder),
            "sessions": link(sessions),
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
