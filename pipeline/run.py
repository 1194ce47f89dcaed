"""Run the pipeline's assets in this process, as the `stretto` commands do, so that the CLI
and the Dagster UI compute with the same code."""

from __future__ import annotations

import logging
import sys

import dagster as dg

from assets.resources import StrettoHome


def materialize(
    assets: list, home: str | None, wait_seconds: float, asset_config: dict | None = None
) -> dg.ExecuteInProcessResult:
    """Materialize `assets` on an ephemeral instance, quietly: the assets' own warnings, one
    line each on stderr; a failure is for the caller to tell (`failure_message`), so Dagster's
    console logger stays silent (it would print a traceback for an expected failure).
    `asset_config` maps an asset's name to its config."""
    resource = StrettoHome(home=home, wait_seconds=wait_seconds, progress=sys.stderr.isatty())
    run_config: dict = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    if asset_config:
        run_config["ops"] = {name: {"config": config} for name, config in asset_config.items()}
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        assets,
        resources={"stretto": resource},
        run_config=run_config,
        raise_on_error=False,
        instance=instance,
    )
    for entry in instance.all_logs(result.run_id):
        if not entry.is_dagster_event and entry.level == logging.WARNING:
            print(f"stretto: {entry.step_key}: {entry.user_message}", file=sys.stderr)
    return result


def output_metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    """The metadata an asset attached to its materialization, as plain values."""
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        if materialization.asset_key.to_user_string() == asset:
            return {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    return {}


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    """The first step failure's message: a `dg.Failure`'s description (an expected failure,
    one line), else the underlying error with its stack (a bug)."""
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            if data.user_failure_data and data.user_failure_data.description:
                return data.user_failure_data.description.strip()
            error = data.error
            if error is None:
                return "a step failed"
            while error.cause is not None:
                error = error.cause
            return error.to_string().strip()
    return "the run failed"
