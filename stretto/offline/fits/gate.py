"""Learning the surprise gate's threshold by 5-fold cross-fitting
(../shared/spec/algorithms.md §10; `stretto learn --surprise Q [--surprise-window N]`).

Each session is put in a fold by its task (its id when it has none). For each fold, a
habit-only flow is learned from the other folds, and every successful session of the fold
with at least `window` step surprises gives its peak window mean under that flow: what the
gate would have seen on a session like it that the flow never learned from. The threshold is
the `ceil(Q·n)`-th smallest of the n peaks, so about a share Q of ordinary sessions would never
trip the gate.

The folds are stretto.offline.fits.crossfit's, as the calibration's are. Learning a flow is the
caller's (`learn`: episodes -> flow dict), so this runs the same with the warehouse's learner
(the CLI, the assets) and in tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from stretto.logs.episode import Episode
from stretto.model.decide import Decider
from stretto.model.surprise import DEFAULT_WINDOW, peak_window_mean, session_surprises
from stretto.offline.fits.crossfit import Learner, cross_fit


class GateError(ValueError):
    pass


def learn_gate(
    episodes: Sequence[Episode],
    learn: Learner,
    quantile: float,
    window: int = DEFAULT_WINDOW,
) -> dict:
    """The flow's `surprise` record: `{window, threshold, quantile, sessions}` (`sessions`:
    how many held-out peaks the threshold rests on). Only successful sessions give peaks
    (`Episode.succeeded`, the learner's rule: give the episodes a rewards file's rewards
    with stretto.logs.rewards.with_rewards)."""
    if not 0 < quantile <= 1:
        raise GateError(f"--surprise wants a quantile in (0, 1], got {quantile}")
    if window < 1:
        raise GateError(f"--surprise-window wants at least 1 step, got {window}")
    peaks: list[float] = []
    # learned from the other folds' successful sessions (the learner drops the others too)
    for flow, held_out in cross_fit(episodes, learn, scored=lambda e: e.succeeded):
        decider = Decider(flow, "habit")
        for episode in held_out:
            peak = peak_window_mean(session_surprises(decider, episode), window)
            if peak is not None:
                peaks.append(peak)
    if not peaks:
        raise GateError(
            f"no successful held-out session has {window} or more steps to score; learn the "
            "gate from more (or longer) sessions, or a shorter --surprise-window"
        )
    peaks.sort()
    rank = min(max(math.ceil(quantile * len(peaks)), 1), len(peaks))
    return {
        "window": window,
        "threshold": peaks[rank - 1],
        "quantile": quantile,
        "sessions": len(peaks),
    }
