"""The alert sensor run on a finished run, as the daemon runs it (shared by the alert and the
nightly tests)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets.resources import StrettoHome
from pipeline.alerts import alert_on_failure


def alert(result: dg.ExecuteInProcessResult, instance, home: Path) -> None:
    """The alert sensor on a finished run, as the daemon calls it."""
    context = dg.build_run_status_sensor_context(
        sensor_name="alert_on_failure",
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(),
        resources={"stretto": StrettoHome(home=str(home))},
    ).for_run_failure()
    alert_on_failure(context)
