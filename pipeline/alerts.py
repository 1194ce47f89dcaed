"""Unattended means alerted: the `alert_on_failure` sensor tells someone about every failed run.

Each failed run of the code location (an ingest whose blocking check failed, a relearn that
staged a change needing review, any step that raised) becomes one JSON line appended to
`HOME/alerts/failed-runs.jsonl` (0600, in a 0700 folder); with `STRETTO_ALERT_URL` set it is
also POSTed there as JSON, Slack-style: `text` (one line a person reads) and the record under
`stretto`. A webhook that cannot be reached is said in the run log and in the line; the line is
written whatever happens to the POST."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import dagster as dg

from assets.resources import StrettoHome
from stretto.home import make_private, private_dirs

ALERT_URL = "STRETTO_ALERT_URL"
POST_TIMEOUT = 10.0  # seconds a webhook may take to answer


def alerts_file(home: Path) -> Path:
    """Where the failed runs are written, one JSON line each."""
    return home / "alerts" / "failed-runs.jsonl"


def failure_record(context: dg.RunFailureSensorContext) -> dict:
    """What a person needs to act on a failed run: which job and partition, why it failed, which
    steps failed with what, and the failed checks' descriptions (e.g. what needs review)."""
    run = context.dagster_run
    steps = [
        {"step": e.step_key, "error": step_error(e)} for e in context.get_step_failure_events()
    ]
    checks = []
    for entry in context.instance.all_logs(
        run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ):
        evaluation = entry.dagster_event.event_specific_data if entry.dagster_event else None
        if isinstance(evaluation, dg.AssetCheckEvaluation) and not evaluation.passed:
            checks.append(
                {
                    "asset": evaluation.asset_key.to_user_string(),
                    "check": evaluation.check_name,
                    "severity": evaluation.severity.value,
                    "description": evaluation.description,
                }
            )
    return {
        "unix_ms": int(time.time() * 1000),
        "run_id": run.run_id,
        "job": run.job_name,
        "partition": run.tags.get("dagster/partition"),
        "message": context.failure_event.message,
        "steps": steps,
        "failed_checks": checks,
    }


def step_error(event: dg.DagsterEvent) -> str:
    """Why a step failed: a `dg.Failure`'s description as it was raised, else the error."""
    data = event.step_failure_data
    if data.user_failure_data is not None and data.user_failure_data.description:
        return data.user_failure_data.description
    return data.error.message.strip() if data.error else ""


def summary(record: dict) -> str:
    """The record as the one line a chat message shows."""
    where = f" ({record['partition']})" if record["partition"] else ""
    why = "; ".join(
        f"{c['check']}: {c['description']}" for c in record["failed_checks"] if c["description"]
    )
    if not why and record["steps"]:
        why = record["steps"][0]["error"].splitlines()[0]
    return f"stretto: run {record['run_id'][:8]} of `{record['job']}`{where} failed" + (
        f": {why}" if why else ""
    )


def post(url: str, record: dict) -> str:
    """POST the record to a webhook; 'sent (HTTP n)' or what went wrong, in one line."""
    body = json.dumps({"text": summary(record), "stretto": record}).encode()
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=POST_TIMEOUT) as answer:
            return f"sent (HTTP {answer.status})"
    except urllib.error.HTTPError as exc:
        return f"not sent: HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"not sent: {reason}"


def append_line(path: Path, record: dict) -> None:
    """One JSON line appended, the file private (0600) and its folder 0700."""
    private_dirs(path.parent)
    line = (json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    make_private(path)


@dg.run_failure_sensor(
    name="alert_on_failure",
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Every failed run (a blocking check that failed, a change that needs review, a "
    "step that raised) as one JSON line in `HOME/alerts/failed-runs.jsonl`; also POSTed as "
    "JSON (Slack-style `text`, the record under `stretto`) to `$STRETTO_ALERT_URL` when set. "
    "Launches nothing.",
)
def alert_on_failure(context: dg.RunFailureSensorContext, stretto: StrettoHome) -> None:
    record = failure_record(context)
    url = os.environ.get(ALERT_URL, "").strip()
    if url:
        record["webhook"] = post(url, record)
        say = context.log.info if record["webhook"].startswith("sent") else context.log.warning
        say(f"alert for run {record['run_id']}: {ALERT_URL} {record['webhook']}")
    path = alerts_file(stretto.layout().home)
    append_line(path, record)
    context.log.info(f"{summary(record)} (written to {path})")
