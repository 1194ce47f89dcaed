"""`learn --calibrate` and `compile --calibrate`: fit the calibration of the served score
(stretto.offline.calibrate; docs/algorithms.md, "Calibrating the served score") and write it
into the flow just learned.

The episodes are split into folds by task (a recorded session without one is its own task).
For each fold, a flow is learned, by the same pipeline as the flow itself, from the learnable
sessions of the other folds (their logs written to a folder of their own under
HOME/cache/calibrate/, so that calibrating again is incremental), and the fold's episodes are
replayed with it. The map fitted on those rows becomes the flow's `calibration.reach`.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

from stretto.cli.options import say
from stretto.home import Paths, private_dirs
from stretto.logs.episode import Episode

WriteLogs = Callable[[list[str], Path], None]  # (session ids, folder): write their logs there


def calibrate_flow(
    out: Path,
    domain: str,
    episodes: list[Episode],
    learnable: set[str],
    write_logs: WriteLogs,
    *,
    home: str | None,
    wait: float,
) -> dict | None:
    """Fit the map for the flow at `out` from cross-fitted replays of `episodes`, learning
    each fold's flow from the `learnable` sessions of the others; write it into the flow.
    The map written, or None (the flow is left as it was, after saying why)."""
    from stretto.cli.learning import learn_folder
    from stretto.model.flow import load_flow, write_flow
    from stretto.offline.calibrate import FOLDS, cross_fitted_rows, fit_map

    folder = Paths.at(home).cache / "calibrate"

    def learn(rest: list[Episode]) -> dict:
        ids = sorted(e.id for e in rest)
        digest = hashlib.blake2b("\n".join(ids).encode(), digest_size=8).hexdigest()
        place = private_dirs(folder / f"{domain}-{digest}")
        logs = place / "logs"
        if not logs.is_dir():
            partial = place / "logs.partial"
            shutil.rmtree(partial, ignore_errors=True)
            write_logs(ids, private_dirs(partial))
            partial.rename(logs)
        learned = learn_folder(logs, domain, place / "fold.flow.json", home=home, wait=wait)
        if learned is None:
            raise CalibrateError(f"learning a fold's flow from {len(ids)} sessions failed")
        return load_flow(place / "fold.flow.json")

    try:
        rows = cross_fitted_rows(episodes, learn, learnable=lambda e: e.id in learnable)
    except CalibrateError as exc:
        say(f"not calibrated: {exc}")
        return None
    table = fit_map(rows)
    if table is None:
        made = sum(bool(r["used"]) for r in rows)
        say(
            f"not calibrated: the replays of {len(episodes)} episodes scored {len(rows)} "
            f"options and the agent made {made} of them (a map needs some of each)"
        )
        return None
    table.update(folds=FOLDS, episodes=len(episodes))
    flow = load_flow(out)
    flow["calibration"] = {"reach": table}
    write_flow(flow, out)
    return table


class CalibrateError(RuntimeError):
    pass


def copy_logs(paths: dict[str, Path]) -> WriteLogs:
    """Write sessions' logs by copying their files (session id -> log path)."""

    def write(ids: list[str], folder: Path) -> None:
        for session in ids:
            target = folder / f"{session}.jsonl"
            shutil.copyfile(paths[session], target)
            target.chmod(0o600)

    return write


def said(table: dict) -> str:
    """What `learn`/`compile` print about a map they wrote."""
    return (
        f"calibrated the served score on {table['options']} options of {table['episodes']} "
        f"episodes replayed in {table['folds']} folds ({table['used']} made by the agent; "
        f"penalty {table['penalty']:g})"
    )
