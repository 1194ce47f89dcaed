"""The logs of one host session with several servers as one episode, as learning merges them
(docs/formats.md §2, "Several servers in one host session"; warehouse/sql/merge.sql is the
same rule over the warehouse's rows), so `stretto audit`, `replay`, `promote` and the rest
read a cross-server session as the flow was learned from it.

Which logs go together is stretto.logs.hostsession's one rule. Each log is read as an episode
of its own (its LLM turns its own), then:

- a log with a server name has its tools named `server::tool` (in calls, results and its tool
  list) and its call ids `server::id`, merged or not;
- events are in wall-clock order: the log's start plus the event's time, then the log (by
  start), then its line; times are counted from the first log's start;
- a turn stays its log's, split where another server's call comes between two of its calls
  (the conversation said meanwhile does not split it: each log's own turns already did);
- the conversation comes from one log, the first that has any;
- the episode's id is the logs' ids joined by `+`; its domain, agent model, task and start
  the first log's; its reward the least of theirs.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

from stretto.logs.episode import (
    Assistant,
    Episode,
    Event,
    ToolCall,
    ToolResult,
    User,
    episode_from_log,
)
from stretto.logs.hostsession import SEPARATOR, Log, plan
from stretto.logs.sessionlog import SessionLog, list_session_logs, read_session_log


class HostSessionWarning(UserWarning):
    """Logs of one host session that could not be merged (the same server twice)."""


def _member(log: SessionLog) -> Log:
    header = log.header
    last = max((line.t_ms for line in log.lines), default=0)
    host = header.extra.get("host_session")
    name = header.extra.get("server_name")
    return Log(
        header.session,
        header.started_unix_ms,
        header.started_unix_ms + last,
        host if isinstance(host, str) else None,
        name if isinstance(name, str) and name else None,
    )


def read_episodes(directory: Path | str) -> list[Episode]:
    """Every session log in a directory as an episode, sorted by session id; the logs of one
    host session with several servers as one episode, as learning reads them."""
    logs = [read_session_log(p) for p in list_session_logs(directory)]
    return sorted(episodes_by_host_session(logs), key=lambda e: e.id)


def episodes_by_host_session(logs: list[SessionLog]) -> list[Episode]:
    """Each log as an episode, but the logs of one host session merged into one."""
    plain: list[Episode] = []
    named: dict[str, SessionLog] = {}
    members: list[Log] = []
    for log in logs:
        member = _member(log)
        if member.server_name is None or member.session in named:
            plain.append(episode_from_log(log))
        else:
            named[member.session] = log
            members.append(member)
    units = plan(members)
    for warning in units.warnings:
        warnings.warn(warning, HostSessionWarning, stacklevel=2)
    merged = [merge([(named[m.session], m.server_name) for m in unit]) for unit in units.units]
    return plain + merged


def merge(logs: list[tuple[SessionLog, str | None]]) -> Episode:
    """These logs (in start order, each with its server name) as one episode."""
    episodes = [episode_from_log(log) for log, _ in logs]
    start = min(log.header.started_unix_ms for log, _ in logs)
    speaker = next(
        (rank for rank, e in enumerate(episodes) if any(_said(event) for event in e.events)), -1
    )
    # (wall ms, log rank, line, index in a batch) -> the event, and for a call its turn
    items: list[tuple[tuple[int, int, int, int], Event | ToolCall, int]] = []
    for rank, ((log, _), episode) in enumerate(zip(logs, episodes, strict=True)):
        shift = log.header.started_unix_ms - start
        for number, event in enumerate(episode.events):
            if isinstance(event, Assistant) and event.calls:
                for call in event.calls:
                    items.append(((call.sent_ms + shift, rank, *call.key), call, number))
            elif isinstance(event, ToolResult):
                items.append(((event.t_ms + shift, rank, event.seq, 0), event, -1))
            elif rank == speaker:
                items.append(((event.t_ms + shift, rank, event.seq, 0), event, -1))
    items.sort(key=lambda item: item[0])

    prefixes = [f"{name}{SEPARATOR}" if name else "" for _, name in logs]
    keys: dict[tuple[int, tuple[int, int]], tuple[int, int]] = {}
    events: list[Event] = []
    turn: Assistant | None = None
    last_turn: tuple[int, int] | None = None  # the previous call's (log, turn)
    for seq, ((t_ms, rank, _, sub), item, in_turn) in enumerate(items, 1):
        prefix = prefixes[rank]
        if isinstance(item, ToolCall):
            key = keys[(rank, item.key)] = (seq, sub)
            call = dataclasses.replace(
                item, id=prefix + item.id, name=prefix + item.name, sent_ms=t_ms, key=key
            )
            if turn is None or last_turn != (rank, in_turn):
                turn = Assistant(None, [], t_ms, seq)
                events.append(turn)
            turn.calls.append(call)
            last_turn = (rank, in_turn)
        elif isinstance(item, ToolResult):
            events.append(
                dataclasses.replace(
                    item,
                    call_id=prefix + item.call_id,
                    name=prefix + item.name,
                    t_ms=t_ms,
                    call_key=keys.get((rank, item.call_key), item.call_key),
                    seq=seq,
                )
            )
        else:
            events.append(dataclasses.replace(item, t_ms=t_ms, seq=seq))
    first = episodes[0]
    rewards = [e.reward for e in episodes if e.reward is not None]
    return Episode(
        id="+".join(log.header.session for log, _ in logs),
        domain=first.domain,
        agent_model=first.agent_model,
        events=events,
        task_id=first.task_id,
        trial=first.trial,
        reward=min(rewards) if rewards else None,
        started_ms=first.started_ms,
        tools={
            prefix + name: dataclasses.replace(info, name=prefix + name)
            for prefix, episode in zip(prefixes, episodes, strict=True)
            for name, info in episode.tools.items()
        },
        sent_after_results={
            prefix + call_id: count
            for prefix, episode in zip(prefixes, episodes, strict=True)
            for call_id, count in episode.sent_after_results.items()
        },
        source=first.source,
    )


def _said(event: Event) -> bool:
    return isinstance(event, User) or (isinstance(event, Assistant) and not event.calls)
