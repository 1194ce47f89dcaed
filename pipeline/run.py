"""Run the pipeline's assets in this process, as the `stretto` commands do, so that the CLI
and the Dagster UI compute with the same code."""

from __future__ import annotations

import sys

import dagster as dg

from assets.resources import StrettoHome


def materialize(
    assets: list, home: str | None, wait_seconds: float, asset_config: dict | None = None
) -> dg.ExecuteInProcessResult:
    """Materialize `assets` on an ephemeral instance, quietly (warnings and errors only).
    `asset_config` maps an asset's name to its config."""
    resource = StrettoHome(home=home, wait_seconds=wait_seconds, progress=sys.stderr.isatty())
    run_config: dict = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    if asset_config:
        run_config["ops"] = {name: {"config": config} for name, config in asset_config.items()}
    return dg.materialize(
        assets, resources={"stretto": resource}, run_config=run_config, raise_on_error=False
    )


def output_metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    """The metadata an asset attached to its materialization, as plain values."""
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        if materialization.asset_key.to_user_string() == asset:
            return {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    return {}


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    """The first step failure's message."""
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            return error.message.strip() if error else "a step failed"
    return "the run failed"
