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

CALIBRATE_HELP = (
    "also fit the calibration of the served score from cross-fitted replays of the episodes "
    "(a flow learned without each fold of tasks replays that fold; docs/algorithms.md) and "
    "write it into the flow"
)


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
    manifest: str | None = None,
    constants: bool = False,
) -> dict | None:
    """Fit the map for the flow at `out` from cross-fitted replays of `episodes`, learning
    each fold's flow from the `learnable` sessions of the others as the flow was learned (with
    its `manifest` and `constants`: a fold that did not know the manifest's reads would make
    no lookup to score); write it into the flow. The map written, or None (the flow is left as
    it was, after saying why)."""
    from stretto.cli.learnfolder import learn_folder
    from stretto.model.flow import load_flow, write_flow
    from stretto.offline.calibrate import cross_fitted_rows, fit_map
    from stretto.vocabulary import FOLDS

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
        learned = learn_folder(
            logs,
            domain,
            place / "fold.flow.json",
            home=home,
            wait=wait,
            manifest=manifest,
            constants=constants,
        )
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


def calibrate_sessions(
    sessions: Path,
    domain: str,
    out: Path,
    *,
    home: str | None,
    wait: float,
    manifest: str | None = None,
    constants: bool = False,
) -> int:
    """`learn --calibrate`: every session log in or below the folder is replayed; those
    the flow learns from (no reward, or a reward of at least 1) learn the folds' flows, with
    the flow's own `manifest` and `constants`."""
    from stretto.logs.episode import episode_from_log
    from stretto.logs.sessionlog import is_session_log, read_session_log

    episodes, learnable, files = [], set(), {}
    for path in sorted(p for p in sessions.rglob("*.jsonl") if is_session_log(p)):
        log = read_session_log(path)
        episode = episode_from_log(log)
        episodes.append(episode)
        files[episode.id] = path
        reward = log.header.extra.get("reward")
        if reward is None or reward >= 1 - 1e-9:
            learnable.add(episode.id)
    table = calibrate_flow(
        out,
        domain,
        episodes,
        learnable,
        copy_logs(files),
        home=home,
        wait=wait,
        manifest=manifest,
        constants=constants,
    )
    if table is not None:
        print(f"stretto: {said(table)}; wrote {out}")
    return 0


def calibrate_compiled(
    files: list, train: set[str], domain: str, out: Path, *, home: str | None, wait: float
) -> int:
    """`compile --calibrate`: every training-task episode is replayed; the successful ones
    learn the folds' flows."""
    import dataclasses

    from stretto.logs.episode import episode_from_log
    from stretto.logs.sessionlog import parse_session_log
    from stretto.logs.tau2 import write_logs

    episodes, learnable = [], set()
    for results in files:
        for sim in results.simulations:
            if sim.task_id not in train:
                continue
            log = parse_session_log(sim.text.encode("utf-8"), sim.source)
            episodes.append(episode_from_log(log))
            if sim.reward >= 1 - 1e-9:
                learnable.add(sim.session)

    def write(ids: list[str], folder: Path) -> None:
        wanted = set(ids)
        for results in files:
            kept = [s for s in results.simulations if s.session in wanted]
            if kept:
                write_logs(dataclasses.replace(results, simulations=kept), folder)

    table = calibrate_flow(out, domain, episodes, learnable, write, home=home, wait=wait)
    if table is not None:
        print(f"stretto: {said(table)}; wrote {out}")
    return 0


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
