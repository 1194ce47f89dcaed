"""The flows' life in the schedule: `nightly_stage` stages a relearned flow beside each served
one (assets.lifecycle) rather than overwriting it, for those who review before serving (the
`nightly` schedule relearns them, serving a relearned flow only when its blocking checks
pass); the drift check runs with every ingest."""

import dagster as dg

from assets.ingest import INGEST_ASSETS
from assets.lifecycle import drift_check, staged_flow

stage_job = dg.define_asset_job(
    "stage",
    selection=dg.AssetSelection.assets(*INGEST_ASSETS, staged_flow),
    description="Ingest new and changed logs, then relearn each served flow beside it "
    "(flows/DOMAIN.staged.flow.json) and score it against the served one; nothing served "
    "changes (`stretto flow-commit` commits).",
)

# Nightly: ingest what came in during the day and stage each served flow for review.
nightly_stage = dg.ScheduleDefinition(
    name="nightly_stage",
    job=stage_job,
    cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Nightly: ingest what came in during the day, then stage each served flow's "
    "relearned version beside it for review (nothing served changes).",
)

LIFECYCLE_ASSETS = [staged_flow]
LIFECYCLE_CHECKS = [drift_check]
