"""The flows' life in the schedule: the nightly run stages a relearned flow beside each served
one (assets.lifecycle) rather than overwriting it; the drift check runs with every ingest."""

import dagster as dg

from assets.ingest import INGEST_ASSETS
from assets.lifecycle import drift_check, staged_flow

stage_job = dg.define_asset_job(
    "stage",
    selection=dg.AssetSelection.assets(*INGEST_ASSETS, staged_flow),
    description="Ingest new and changed logs, then relearn each served flow beside it "
    "(flows/<domain>.staged.flow.json) and score it against the served one; nothing served "
    "changes (`stretto flow-commit` commits).",
)

# Nightly: ingest what came in during the day and stage each served flow for review.
nightly = dg.ScheduleDefinition(
    name="nightly",
    job=stage_job,
    cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
)

LIFECYCLE_ASSETS = [staged_flow]
LIFECYCLE_CHECKS = [drift_check]
