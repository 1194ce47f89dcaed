"""Which tasks the arbiter learns from (../shared/spec/algorithms.md §0): the held-out share
of `learn`; the folds of `compile`'s cross-fitted arbiters are stretto.vocabulary.fold_of's."""

from __future__ import annotations

import math
from collections.abc import Sequence

from stretto.model.decide import MASK
from stretto.vocabulary import fnv1a64

HELD_OUT_SHARE = 0.3


def mix(z: int) -> int:
    """The splitmix64 finalizer."""
    z &= MASK
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    return z


def rank(salt: str, task: str) -> int:
    """A salted pseudo-random order of tasks."""
    return mix(fnv1a64(f"{salt}/{task}"))


def _round(x: float) -> int:
    return math.floor(x + 0.5)  # half away from zero, as the reference rounds


def learn_split(tasks: Sequence[str]) -> tuple[list[str], list[str]]:
    """(training tasks, held-out tasks): 30% of the distinct tasks, at least one on each side,
    held out for the arbiter, chosen by a salted order; each side keeps the given order."""
    distinct = list(dict.fromkeys(tasks))
    if len(distinct) < 2:
        raise ValueError(
            f"an arbiter needs sessions of at least 2 tasks (one to learn the habit from, one "
            f"to ask about); got {len(distinct)}"
        )
    n = min(max(_round(HELD_OUT_SHARE * len(distinct)), 1), len(distinct) - 1)
    held = set(sorted(distinct, key=lambda t: rank("learn-split", t))[:n])
    return [t for t in distinct if t not in held], [t for t in distinct if t in held]
