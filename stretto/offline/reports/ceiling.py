"""The read-only ceiling (../shared/spec/results.md §2.3): the LLM turns a perfect read-only
speculator could have saved in a recorded episode. It does not depend on any flow."""

from __future__ import annotations

from stretto.logs.episode import Assistant, Episode
from stretto.model.binding import parse_output


def _norm(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip().lower()


def _leaves(value, out: set[str]) -> None:
    if isinstance(value, dict):
        for item in value.values():
            _leaves(item, out)
    elif isinstance(value, list):
        for item in value:
            _leaves(item, out)
    elif value is not None:
        out.add(_norm(value))


def _result_leaves(content: str, out: set[str]) -> None:
    parsed = parse_output(content)
    if isinstance(parsed, dict | list):
        _leaves(parsed, out)
    elif parsed is not None and not isinstance(parsed, str):
        out.add(_norm(parsed))
    else:
        for line in content.splitlines():
            if line.strip():
                out.add(_norm(line))


def ceiling_turns(episode: Episode, kinds: dict[str, str]) -> int:
    """Turns a perfect read-only speculator could have saved: turns whose calls are all reads,
    after some earlier turn made calls, with every argument copied from an earlier successful
    result of the episode."""
    seen: set[str] = set()
    results = episode.results_by_key()
    called_before = False
    count = 0
    for event in episode.events:
        if not isinstance(event, Assistant):
            continue
        calls = [c for c in event.calls if not c.by_proxy]
        if not calls:
            continue
        reads = all(kinds.get(c.name) == "read" for c in calls)
        if reads and called_before:
            leaves: set[str] = set()
            for call in calls:
                _leaves(call.arguments, leaves)
            if leaves <= seen:
                count += 1
        called_before = True
        for call in calls:
            result = results.get(call.key)
            if result is not None and not result.error:
                _result_leaves(result.content, seen)
    return count
