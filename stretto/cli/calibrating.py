"""`learn --calibrate` and `compile --calibrate`: fit the calibration of the served score
(docs/algorithms.md, "Calibrating the served score") and put it into the flow just learned,
before the command writes it; pipeline.learnfolder.fit_calibration fits it, this says what
came of it."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from stretto.cli.options import say

CALIBRATE_HELP = (
    "also fit the calibration of the served score from cross-fitted replays of the episodes "
    "(a flow learned without each fold of tasks replays that fold; docs/algorithms.md) and "
    "write it into the flow"
)


def calibrate(
    flow: dict,
    sessions: Path,
    domain: str,
    *,
    home: str | None,
    manifest: str | None = None,
    constants: bool = False,
    tasks: Collection[str] | None = None,
) -> dict | None:
    """Calibrate `flow` (in memory), learned from the folder of logs `sessions` (`learn`:
    every log in it; `compile`: those of its training `tasks`): the map put into it, or None
    after saying why there is none (the flow is then left as it was: not an error)."""
    # the pipeline loads Dagster: only the commands that learn pay for it
    from pipeline.learnfolder import fit_calibration
    from stretto.offline.fits.calibrate import CalibrateError

    try:
        table = fit_calibration(
            sessions, domain, home=home, manifest=manifest, constants=constants, tasks=tasks
        )
    except CalibrateError as exc:
        say(f"not calibrated: {exc}")
        return None
    flow["calibration"] = {"reach": table}
    return table


def said(table: dict) -> str:
    """What `learn`/`compile` print about a map they wrote."""
    return (
        f"calibrated the served score on {table['options']} options of {table['episodes']} "
        f"episodes replayed in {table['folds']} folds ({table['used']} made by the agent; "
        f"penalty {table['penalty']:g})"
    )
