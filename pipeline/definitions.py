"""The Dagster Definitions: `dagster dev -m pipeline` shows and materializes them.

The graph: logs (an observable source) -> the tables (sessions, messages, calls, context,
tools, quarantine) -> steps -> counts (per domain and day) -> flow (per domain) -> thresholds,
audit, replay, evaluation, promotion (per domain). Domains and days are dynamic partitions,
added by the `partitions` sensor (which launches nothing) as soon as a log under logs/ names
them, and as their logs are ingested.

Automation, all off by default but `partitions`, `relearn_after_ingest` and
`reports_after_relearn` (which only act on what the others started): `nightly` ingests at 03:00
and `new_logs` when a log's content is not in the warehouse yet; when such an ingest succeeds,
`relearn_after_ingest` relearns each domain's flow and searches its thresholds when the flow's
counts moved past the search's tolerance (one run per domain, one at a time:
pipeline/dagster.yaml); a relearned flow is served only when its blocking checks pass, else
staged for review (assets/learn.py); each flow materialized makes its domain's reports again
(`reports_after_relearn`, declarative automation). `alert_on_failure` (on) writes every failed
run to HOME/alerts/ and to $STRETTO_ALERT_URL (pipeline/alerts.py).
`nightly_stage`, instead, ingests and stages each served flow's relearned version beside it
for review (pipeline/lifecycle.py); the `drift` check runs with every ingest.
`weekly_compaction` rewrites each partition's current rows into one file.
"""

import dagster as dg

from assets.audit import audit
from assets.evaluate import evaluation
from assets.ingest import INGEST_ASSETS, logs, pending, plan_digest
from assets.learn import counts, flow
from assets.partitions import (
    HEADERS_PER_TICK,
    add_requests,
    known_parts,
    parts_in_logs,
    register,
)
from assets.promote import promotion
from assets.replay import replay_report
from assets.resources import StrettoHome
from assets.search import thresholds
from pipeline.alerts import alert_on_failure
from pipeline.compaction import compact_job, weekly_compaction
from pipeline.executor import in_process_or_dask
from pipeline.lifecycle import LIFECYCLE_ASSETS, LIFECYCLE_CHECKS, nightly_stage, stage_job

THEN = "stretto/then"  # a tag on an ingest run: what to run once it has succeeded
# a tag on every relearn run: pipeline/dagster.yaml lets one such run go at a time, so the
# per-domain runs a nightly starts at once queue instead of sharing the cores
RELEARN_SLOT = "stretto/relearn"

ingest_job = dg.define_asset_job(
    "ingest",
    selection=dg.AssetSelection.assets(*INGEST_ASSETS),
    description="Ingest new and changed session logs and derive their steps.",
)
counts_job = dg.define_asset_job(
    "count_days",
    selection=dg.AssetSelection.assets(counts),
    description="Count the chosen days of the chosen domains (those already counted with the "
    "same sessions are read back).",
)
relearn_job = dg.define_asset_job(
    "relearn",
    selection=dg.AssetSelection.assets(flow, thresholds),
    description="Learn a domain's flow again (the sum of its days' counts, counting only the "
    "days that changed), served only when its blocking checks pass (else staged for review "
    "and the run fails), and search its per-site thresholds for review when the flow's counts "
    "moved past the search's tolerance. One relearn run at a time (pipeline/dagster.yaml).",
    tags={RELEARN_SLOT: "1"},
)
reports_job = dg.define_asset_job(
    "reports",
    selection=dg.AssetSelection.assets(audit, replay_report, evaluation, promotion),
    description="A domain's audit, replay, evaluation and promotion reports.",
)


@dg.schedule(
    job=ingest_job,
    cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Nightly: ingest what came in during the day, then (relearn_after_ingest) "
    "relearn each domain's flow.",
)
def nightly(context: dg.ScheduleEvaluationContext):
    return dg.RunRequest(tags={THEN: "relearn"})


@dg.sensor(
    job=ingest_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Starts an ingest (then a relearn) when a log under logs/ holds content the "
    "warehouse does not have: new or changed by size and content hash, whatever its mtime "
    "(a log copied with cp -p or unpacked from an archive is found too).",
)
def new_logs(context: dg.SensorEvaluationContext, stretto: StrettoHome):
    plan = pending(stretto.layout())
    if not plan.read:
        return dg.SkipReason("no session log holds content the warehouse does not have")
    key = plan_digest(plan)
    context.log.info(f"{len(plan.read)} log(s) to ingest, e.g. {plan.read[0].rel}")
    return dg.RunRequest(run_key=f"logs-{plan.commits}-{key}", tags={THEN: "relearn"})


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registers as partitions the domains and days of the session logs under logs/ "
    "(read from their headers, before any ingest) and of the warehouse; launches no run. So "
    "Materialize all on a fresh home with logs covers them on the first click.",
)
def partitions(context: dg.SensorEvaluationContext, stretto: StrettoHome):
    layout = stretto.layout()
    # the cursor: the newest ctime of a log read, so each tick reads only new or changed logs
    in_logs, newest = parts_in_logs(layout, int(context.cursor or 0), HEADERS_PER_TICK)
    requests = add_requests(context.instance, in_logs + known_parts(layout))
    for request in requests:
        context.log.info(
            f"adding {request.partitions_def_name}: {', '.join(request.partition_keys)}"
        )
    return dg.SensorResult(dynamic_partitions_requests=requests, cursor=str(newest))


# The reports (audit, replay, evaluation, promotion) carry AutomationCondition.eager()
# (assets/reports.py): this sensor makes a domain's reports again after each run that
# materialized its flow, whatever launched it. Chosen over a schedule, a run tag and another
# run-status sensor: nothing to keep in step with the relearn job, and a staged flow (not
# materialized) starts no report.
reports_after_relearn = dg.AutomationConditionSensorDefinition(
    "reports_after_relearn",
    target=dg.AssetSelection.assets(audit, replay_report, evaluation, promotion),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="After a run materializes a domain's flow (the nightly's relearn or any "
    "other), makes that domain's audit, replay, evaluation and promotion reports again "
    "(declarative automation: each report's condition is `AutomationCondition.eager()`).",
)


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    monitored_jobs=[ingest_job],
    request_job=relearn_job,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="After an ingest the nightly schedule or the new_logs sensor started: relearn "
    "every domain (one run per domain partition).",
)
def relearn_after_ingest(context: dg.RunStatusSensorContext, stretto: StrettoHome):
    if context.dagster_run.tags.get(THEN) != "relearn":
        return dg.SkipReason("an ingest not started to relearn")
    parts = known_parts(stretto.layout())
    register(context.instance, parts)
    wanted = sorted({d for d, _ in parts})
    return [
        dg.RunRequest(run_key=f"{context.dagster_run.run_id}-{d}", partition_key=d) for d in wanted
    ]


defs = dg.Definitions(
    assets=[
        logs,
        *INGEST_ASSETS,
        counts,
        flow,
        thresholds,
        promotion,
        audit,
        evaluation,
        replay_report,
        *LIFECYCLE_ASSETS,
    ],
    asset_checks=LIFECYCLE_CHECKS,
    jobs=[ingest_job, counts_job, relearn_job, reports_job, compact_job, stage_job],
    schedules=[nightly, nightly_stage, weekly_compaction],
    sensors=[new_logs, partitions, relearn_after_ingest, reports_after_relearn, alert_on_failure],
    resources={"stretto": StrettoHome.from_environment()},
    # A run's steps in the run's own process unless its run config picks a Dask cluster: each
    # is cheap to start that way (a process per step cost seconds for seconds of work); ingest
    # spreads its batches over cores itself.
    executor=in_process_or_dask,
)
