"""Cross-fitting by task: the one way a fold's episodes are scored by a flow that never
learned from them (../shared/spec/algorithms.md §0, §10). The calibration of the served
score (stretto.offline.fits.calibrate) and the surprise gate (stretto.offline.fits.gate) both
use it.

An episode's task is its `task_id`, or, for a recorded session with none, itself; a task's
fold is stretto.vocabulary.fold_of (FNV-1a of its id modulo the folds), so an episode and its
task's other episodes are always held out together. Learning a fold's flow is the caller's
(`learn`: episodes -> flow dict): the warehouse's learner over the sessions of the other folds
(warehouse.counts.learn.learner), or a test's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from stretto.logs.episode import Episode
from stretto.vocabulary import FOLDS, fold_of

Learner = Callable[[list[Episode]], dict]


def task_of(episode: Episode) -> str:
    """What an episode is grouped by: its task, or, for a recorded session with none, itself."""
    return episode.task_id or episode.id


def cross_fit(
    episodes: Sequence[Episode],
    learn: Learner,
    *,
    learnable: Callable[[Episode], bool] = lambda e: e.succeeded,
    scored: Callable[[Episode], bool] = lambda e: True,
    folds: int = FOLDS,
) -> Iterator[tuple[dict, list[Episode]]]:
    """For each fold in turn: the flow learned from the `learnable` episodes of the other
    folds, and the fold's episodes it is to score (those `scored`), in the order given. A fold
    with nothing to score, or nothing to learn from without it, is skipped (and nothing is
    learned for it)."""
    for k in range(folds):
        held = [e for e in episodes if fold_of(task_of(e), folds) == k and scored(e)]
        rest = [e for e in episodes if fold_of(task_of(e), folds) != k and learnable(e)]
        if held and rest:
            yield learn(rest), held
