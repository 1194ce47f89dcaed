"""Which logs are one session: the logs of one host session that several servers' proxies
wrote (docs/formats.md §2, "Several servers in one host session"). The one rule, read by
learning (warehouse/counts/merge.py, over the warehouse's rows) and by the offline tools that read
logs (stretto.logs.merged.read_episodes, over the files), so both see the same sessions.

A log with a server name and a host session joins the other logs of that host session that
overlap it in time; a log without either is a session of its own. Two logs of one server name
that overlap cannot be told apart by their tools' names: that group is not merged (a warning
says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SEPARATOR = "::"  # a merged log's tools are named `server::tool`


@dataclass(frozen=True)
class Log:
    """A session to learn from, as the merge needs it."""

    session: str
    started_ms: int
    ended_ms: int
    host_session: str | None
    server_name: str | None
    reward: float | None = None


@dataclass
class Units:
    """The sessions learning sees: each a list of logs (one, or several merged)."""

    units: list[list[Log]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def unit_id(self, unit: list[Log]) -> str:
        return unit[0].session if len(unit) == 1 else "+".join(log.session for log in unit)

    @property
    def renamed(self) -> bool:
        """Whether any log's rows are rewritten (a server name: its tools are prefixed)."""
        return any(log.server_name for unit in self.units for log in unit)


def _overlapping(logs: list[Log]) -> list[list[Log]]:
    """The logs (of one host session) in groups that overlap in time, by start."""
    groups: list[list[Log]] = []
    end = -1
    for log in sorted(logs, key=lambda g: (g.started_ms, g.session)):
        if groups and log.started_ms <= end:
            groups[-1].append(log)
            end = max(end, log.ended_ms)
        else:
            groups.append([log])
            end = log.ended_ms
    return groups


def plan(logs: list[Log]) -> Units:
    """Which logs are learned together. Units come in the order of their first log's start."""
    out = Units()
    by_host: dict[str, list[Log]] = {}
    for log in logs:
        if log.server_name and log.host_session:
            by_host.setdefault(log.host_session, []).append(log)
        else:
            out.units.append([log])
    for host, members in sorted(by_host.items()):
        for group in _overlapping(members):
            names = [log.server_name for log in group]
            twice = sorted({n for n in names if names.count(n) > 1 and n})
            if twice:
                out.warnings.append(
                    f"host session {host}: {len(group)} logs overlap with server name(s) "
                    f"{', '.join(twice)} more than once; learned each on its own, not merged"
                )
                out.units.extend([log] for log in group)
            else:
                out.units.append(group)
    out.units.sort(key=lambda unit: (unit[0].started_ms, unit[0].session))
    return out
