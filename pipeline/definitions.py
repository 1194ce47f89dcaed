"""The Dagster Definitions: `dagster dev -m pipeline` shows and materializes them."""

import os

import dagster as dg

from assets.audit import audit
from assets.evaluate import evaluation
from assets.ingest import INGEST_ASSETS
from assets.learn import flow
from assets.promote import promotion
from assets.replay import replay_report
from assets.resources import StrettoHome
from assets.search import thresholds
from pipeline.lifecycle import LIFECYCLE_ASSETS, LIFECYCLE_CHECKS, nightly, stage_job

ingest_job = dg.define_asset_job(
    "ingest",
    selection=dg.AssetSelection.assets(*INGEST_ASSETS),
    description="Ingest new and changed session logs and derive their steps.",
)

relearn_job = dg.define_asset_job(
    "relearn",
    selection=dg.AssetSelection.assets(*INGEST_ASSETS, flow, thresholds),
    description="Ingest new and changed logs, learn every domain's flow again, and search "
    "its per-site thresholds on its sessions (beside it, for review).",
)


def newest_log_mtime(logs: str) -> int:
    newest = 0
    for folder, _, names in os.walk(logs):
        for name in names:
            if name.endswith(".jsonl"):
                newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime_ns)
    return newest


@dg.sensor(
    job=ingest_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Starts an ingest run when a log under logs/ is new or has changed.",
)
def new_logs(context: dg.SensorEvaluationContext, stretto: StrettoHome):
    newest = newest_log_mtime(str(stretto.layout().logs))
    last = int(context.cursor or 0)
    if newest <= last:
        return dg.SkipReason("no new or changed session logs")
    context.update_cursor(str(newest))
    return dg.RunRequest(run_key=f"logs-{newest}")


defs = dg.Definitions(
    assets=[
        *INGEST_ASSETS,
        flow,
        thresholds,
        promotion,
        audit,
        evaluation,
        replay_report,
        *LIFECYCLE_ASSETS,
    ],
    asset_checks=LIFECYCLE_CHECKS,
    jobs=[ingest_job, relearn_job, stage_job],
    schedules=[nightly],
    sensors=[new_logs],
    resources={"stretto": StrettoHome()},
)
