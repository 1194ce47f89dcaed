"""Learning a flow from a folder of session logs, as `stretto learn` and `stretto compile` do,
and calibrating it.

The folder is ingested into a warehouse of its own (under HOME/cache/learn/, kept so that
learning again is incremental) and the pipeline's `flow` asset learns the flow from it, so the
commands and the Dagster UI learn with the same code. Calibrating (`--calibrate`) cross-fits
on that same warehouse: each fold's flow is learned from the other folds' sessions without a
pipeline run or an ingest of its own (warehouse.counts.learn.learner, as the surprise gate's folds
are), and the fold's episodes are replayed with it (stretto.offline.fits.calibrate).

A flow the command adds to before it is done (`--costs`: its serving threshold, `--calibrate`:
its calibration) is learned into a private draft instead (`draft_path`), and the finished
flow is written to the output path once (`write_finished`): a reader of that path (the
proxy's flow reloading, `flow-show`, the console) never sees a flow that is not the final one.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from assets.ingest import INGEST_ASSETS
from assets.learn import flow
from pipeline.run import failure_message, materialize, output_metadata
from stretto.home import Paths, private_dirs
from stretto.logs.episode import episode_from_log
from stretto.logs.sessionlog import is_session_log, read_session_log
from stretto.model.flow import load_manifest, write_flow
from stretto.offline.fits.calibrate import calibration_map
from warehouse.counts.learn import learner
from warehouse.layout import UNDER_HOME, Layout


class LearnFolderError(RuntimeError):
    """The pipeline failed to learn the flow; the message says why."""


def learn_cache(home: str | Path | None, sessions: Path) -> Path:
    """The warehouse `learn` keeps for a folder of logs, under HOME/cache/learn/."""
    folder = Path(sessions).expanduser().resolve()
    key = hashlib.blake2b(str(folder).encode(), digest_size=8).hexdigest()
    return Paths.at(home).cache / "learn" / key


def cache_layout(home: str | Path | None, sessions: Path) -> Layout:
    """The warehouse `learn` keeps for a folder of logs (its `logs` a link to the folder)."""
    sessions = Path(sessions).expanduser().resolve()
    cache = learn_cache(home, sessions)
    private_dirs(cache)
    logs = cache / "logs"
    if logs.is_symlink() and Path(os.readlink(logs)) != sessions:
        logs.unlink()
    if not logs.exists():
        logs.symlink_to(sessions, target_is_directory=True)
    return Layout.at(cache, UNDER_HOME)


def learn_folder(
    sessions: Path,
    domain: str,
    out: Path,
    *,
    home: str | None,
    wait: float,
    manifest: str | None = None,
    constants: bool = False,
    options: dict[str, Any] | None = None,
    arbiter: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Ingest a folder of session logs into its warehouse (cache_layout), then run the
    pipeline's `flow` asset to learn the `domain` flow into `out`; `options` are more of the
    asset's config (half_life, rewards, surprise, surprise_window, otel), `arbiter` its
    arbiter fields (oracle, ...). The asset's metadata; LearnFolderError when the run fails."""
    layout = cache_layout(home, sessions)
    out = _out_folder_made(out, home)
    config: dict[str, Any] = {"domain": domain, "out": str(out), "constants": constants}
    if manifest:
        config["manifest"] = str(Path(manifest).expanduser().resolve())
    config.update(options or {})
    config.update(arbiter or {})
    result = materialize(
        [*INGEST_ASSETS, flow], str(layout.home), wait, {"flow": config}, warehouse=layout.url
    )
    if not result.success:
        raise LearnFolderError(failure_message(result))
    return output_metadata(result, "flow")


@contextmanager
def draft_path(home: str | Path | None, sessions: Path) -> Iterator[Path]:
    """Where learn_folder puts a flow the command will add to before it writes it: a file in a
    private folder of its own (0700, under the folder's learn cache), never the output path,
    removed with its folder when the block ends."""
    drafts = private_dirs(learn_cache(home, sessions) / "drafts")
    with tempfile.TemporaryDirectory(dir=drafts) as folder:
        yield Path(folder) / "draft.flow.json"


def write_finished(flow: dict, out: Path, home: str | Path | None) -> None:
    """Write the finished flow to `out`, its one write there (write_flow: whole, by a rename),
    its folder made as learn_folder makes it."""
    write_flow(flow, _out_folder_made(out, home))


def _out_folder_made(out: Path, home: str | Path | None) -> Path:
    """`out` resolved; HOME/flows/ (the served flows' folder: stretto's own) made 0700 if it
    is `out`'s folder."""
    out = Path(out).expanduser().resolve()
    if out.parent == Paths.at(home).flows:
        private_dirs(out.parent)
    return out


def fit_calibration(
    sessions: Path,
    domain: str,
    *,
    home: str | None,
    manifest: str | None = None,
    constants: bool = False,
    tasks: Collection[str] | None = None,
) -> dict:
    """`--calibrate`, after learn_folder learned the flow from the folder: fit the map of its
    served score on cross-fitted replays of every session log in or below the folder (of
    `tasks` only, when given: `compile`'s training tasks), each fold's flow learned from the
    successful sessions of the others as the flow was (with its `manifest` and `constants`: a
    fold that did not know the manifest's reads would make no lookup to score). The map, for
    the caller to put into the flow as its `calibration.reach`;
    stretto.offline.fits.calibrate.CalibrateError when there is nothing to calibrate against."""
    folder = Path(sessions).expanduser().resolve()
    episodes = [
        episode_from_log(read_session_log(path))
        for path in sorted(p for p in folder.rglob("*.jsonl") if is_session_log(p))
    ]
    if tasks is not None:
        episodes = [e for e in episodes if e.task_id in tasks]
    learn = learner(
        cache_layout(home, folder),
        domain,
        manifest=load_manifest(manifest) if manifest else None,
        with_constants=constants,
    )
    return calibration_map(episodes, learn)
