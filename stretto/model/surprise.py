"""The surprise gate (../shared/spec/algorithms.md §10): once the agent has left its habit, the
flow stops making lookups for the rest of the session.

At each decision point whose next step is the agent's own, the step's surprise is
`−ln max(p, 1e-6)`, p the habit prior at the site (each lookup the site offers, and respond
for everything else) of what the agent did. The gate closes at the first window of `window`
consecutive step surprises whose mean exceeds `threshold`, and stays closed.

Light on purpose: the proxy imports it (no numpy).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from stretto.logs.episode import Assistant, Episode, ToolResult
from stretto.logs.steps import episode_steps
from stretto.model.decide import Decider, theta_text
from stretto.model.defaults import SURPRISE_WINDOW
from stretto.vocabulary import FLOOR, RESPOND

DEFAULT_WINDOW = SURPRISE_WINDOW


def step_surprise(probs: Mapping[str, float], step: str | None) -> float:
    """−ln max(p, 1e-6) of the agent's step under the habit prior at a site: `probs` over the
    site's lookups and respond; a step that is not one of the lookups (a write, another tool,
    a reply, the user speaking: None) counts as respond."""
    key = step if step is not None and step != RESPOND and step in probs else RESPOND
    return -math.log(max(probs.get(key, 0.0), FLOOR))


@dataclass
class Gate:
    """The gate's state over one session: feed it each step surprise in order."""

    threshold: float
    window: int = DEFAULT_WINDOW
    steps: int = 0  # step surprises seen
    closed_at: int | None = None  # the step count at which it closed
    closing_mean: float | None = None
    recent: deque = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"the surprise window wants at least 1 step, got {self.window}")
        if not math.isfinite(self.threshold) or self.threshold < 0:
            raise ValueError(f"the surprise threshold wants a number ≥ 0, got {self.threshold}")

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    def observe(self, surprise: float) -> bool:
        """Count one step surprise; whether the gate is closed after it."""
        self.steps += 1
        if self.closed:
            return True
        self.recent.append(surprise)
        if len(self.recent) > self.window:
            self.recent.popleft()
        if len(self.recent) == self.window:
            mean = sum(self.recent) / self.window
            if mean > self.threshold:
                self.closed_at, self.closing_mean = self.steps, mean
        return self.closed

    @property
    def reason(self) -> str | None:
        """The hand-back reason while closed (the flow log's `reason`)."""
        if not self.closed:
            return None
        return (
            f"the agent left its habit: {self.closing_mean:.2f} nats per step over its last "
            f"{self.window} steps, above {theta_text(self.threshold)}"
        )


def gate_from_flow(flow: dict, override: str | float | None = None) -> Gate | None:
    """The gate a proxy serves: the flow's `surprise` record, or `override` (`off`, or a
    threshold used with the flow's window, else the default window). None: no gate."""
    record = flow.get("surprise")
    window = record["window"] if record else DEFAULT_WINDOW
    if override is None:
        return Gate(record["threshold"], window) if record else None
    if isinstance(override, str):
        if override == "off":
            return None
        try:
            override = float(override)
        except ValueError:
            raise ValueError(
                f"a surprise threshold is `off` or a number, got {override!r}"
            ) from None
    return Gate(float(override), window)


def decision_points(episode: Episode) -> Iterator[tuple[list[str], tuple[str, bool], str | None]]:
    """Audit-style decision points whose next step is the agent's own: each tool result that
    something other than another result follows, unless the flow's own lookup (a `stretto-…`
    call) follows it. Yields (the step names so far, the last call as (tool, failed), the
    agent's step: the first call of its next turn, or None for a reply or the user)."""
    names = {s.call_id: s.name() for s in episode_steps(episode) if s.call_id}
    events = episode.events
    history: list[str] = []
    for i, event in enumerate(events):
        if isinstance(event, Assistant):
            history.extend(names.get(c.id, c.name) for c in event.calls)
            if not event.calls:
                history.append(RESPOND)
        elif isinstance(event, ToolResult):
            following = events[i + 1] if i + 1 < len(events) else None
            if following is None or isinstance(following, ToolResult):
                continue
            step = None
            if isinstance(following, Assistant) and following.calls:
                if following.calls[0].by_proxy:
                    continue  # the flow's lookup, not the agent's step
                step = following.calls[0].name
            yield list(history), (event.name, event.error), step


def session_surprises(decider: Decider, episode: Episode) -> list[float]:
    """The step surprises of a session in order, under `decider`'s habit (sites that offer no
    lookup are skipped: the flow hands back there anyway)."""
    out = []
    for history, last, step in decision_points(episode):
        probs = habit_prior(decider, history, last)
        if probs:
            out.append(step_surprise(probs, step))
    return out


def habit_prior(decider: Decider, history: Sequence[str], last: tuple[str, bool]) -> dict:
    """The habit's probabilities at the site after `last`: each lookup, and respond."""
    if decider.kind == "habit":
        return decider.probabilities(list(history), last)
    lookups = decider.options.get(last, [])
    probs = {tool: decider.habit.prob(tool, history) for tool in lookups}
    if probs:
        probs[RESPOND] = max(0.0, 1.0 - sum(probs.values()))
    return probs


def peak_window_mean(surprises: Sequence[float], window: int) -> float | None:
    """The largest mean of `window` consecutive step surprises (None: fewer steps)."""
    if len(surprises) < window:
        return None
    total = sum(surprises[:window])
    peak = total
    for i in range(window, len(surprises)):
        total += surprises[i] - surprises[i - window]
        peak = max(peak, total)
    return peak / window
