"""`--rewards FILE`: each session's reward, for learning from successful sessions only
(../shared/spec/algorithms.md §2.4, §7; docs/formats.md §1.7).

The file is one JSON object: session id (for logs of one host session with several servers,
the host session) -> a number. A session it does not name keeps its log's reward, and a
recorded session without one counts as successful; successful means a reward of at least 1.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from stretto.logs.sessionlog import LogError

SUCCESS_REWARD = 1 - 1e-9


class _Rewarded(Protocol):  # an Episode (stretto.logs.episode builds on this module)
    id: str
    reward: float | None


E = TypeVar("E", bound=_Rewarded)


def read_rewards(path: str | Path) -> dict[str, float]:
    """The rewards file as {session: reward}; LogError naming the file and the field."""
    path = Path(path)
    try:
        value = json.loads(path.read_text())
    except OSError as exc:
        raise LogError(path, None, f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise LogError(path, None, f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise LogError(path, None, "expected a JSON object of session id -> reward")
    rewards = {}
    for session, reward in value.items():
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            raise LogError(path, None, f"expected a number, got {json.dumps(reward)}", session)
        if not math.isfinite(reward):
            raise LogError(path, None, "expected a finite number", session)
        rewards[session] = float(reward)
    return rewards


def successful(reward: float | None) -> bool:
    """A session without a reward (a recorded one) counts as successful."""
    return reward is None or reward >= SUCCESS_REWARD


def with_rewards(episodes: Sequence[E], rewards: Mapping[str, float] | None) -> list[E]:
    """The episodes with each reward the file gives in place of the log's (the file wins, as
    in the warehouse's learning), so `Episode.succeeded` follows the same rule."""
    if not rewards:
        return list(episodes)
    return [
        dataclasses.replace(e, reward=rewards[e.id]) if e.id in rewards else e  # type: ignore[type-var]
        for e in episodes
    ]
