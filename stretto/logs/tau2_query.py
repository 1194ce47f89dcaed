"""One conversation in τ²-bench's message form as an episode: what `stretto serve` is asked
(docs/formats.md §8). Converted exactly as a results file's simulation is
(stretto.logs.tau2), then read by the session-log and episode readers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stretto.logs.episode import Episode, episode_from_log
from stretto.logs.sessionlog import parse_session_log
from stretto.logs.tau2 import convert_simulation


def episode_from_messages(
    messages: Any,
    *,
    task_id: str,
    domain: str,
    agent_model: str | None = None,
    source: str = "query",
) -> Episode:
    """The episode of `messages` (τ²-bench's: roles, contents, tool calls and results).
    LogError names `source` and the field."""
    sim = {"id": "query", "task_id": task_id, "messages": messages}
    converted = convert_simulation(
        Path(source),
        0,
        sim,
        domain=domain,
        agent_model=agent_model,
        file_key="query",
        file_started_ms=0,
        tool_list=None,
        client_version="unknown",
    )
    return episode_from_log(parse_session_log(converted.text.encode("utf-8"), source))
