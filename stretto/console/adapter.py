"""Every call the console makes into the rest of stretto, in one place: when an API below
moves, this module is the one to change. Nothing else in stretto.console imports stretto.home,
stretto.logs, stretto.model, stretto.offline or warehouse.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from pathlib import Path
from typing import Any

from stretto import __version__ as VERSION  # noqa: F401 - re-exported for the console
from stretto.home import Paths, default_home  # noqa: F401 - re-exported
from stretto.logs.episode import (  # noqa: F401 - re-exported
    Episode,
    ToolCall,
    ToolResult,
    User,
    call_id_text,
    context_message,
    episode_from_log,
    is_llm_turn,
    read_episode,
)
from stretto.logs.logreader import LineReader, flow_log_of, read_flow_log  # noqa: F401
from stretto.logs.pairing import is_answer, messages  # noqa: F401 - re-exported
from stretto.logs.sessionlog import (  # noqa: F401 - re-exported
    SIDE_FILE_SUFFIXES,
    LogError,
    SessionLog,
    is_session_log,
    list_session_logs,
    parse_header,
    parse_wire_line,
)
from stretto.logs.toollist import WRITE
from stretto.model.binding import value_text  # noqa: F401 - re-exported
from stretto.model.decide import DEFAULT_THRESHOLD  # noqa: F401 - re-exported
from stretto.model.flow import FlowError, load_flow  # noqa: F401 - re-exported
from stretto.offline.lifecycle import drift as offline_drift
from stretto.offline.lifecycle import flowdiff, flowshow, promote, stage, versions
from stretto.offline.reports import replay as offline_replay
from stretto.offline.reports import search
from stretto.offline.walk import BOUND, agent_made
from warehouse.layout import Layout

DEFAULT_COSTS: tuple[float, float] = search.DEFAULT_COSTS


# --- the home ---------------------------------------------------------------------------------


def unscanned(data: Path) -> frozenset[str]:
    """The folders under the home that hold no sessions or flows of their own: the console's,
    the learn cache (it links back to session folders), the warehouse, Dagster's and the
    System-One cache."""
    paths = Paths(data)
    return frozenset({"console", paths.cache.name, paths.warehouse.name, "dagster", "oracle-cache"})


def default_flow(data: Path, domain: str) -> Path:
    """Where a domain's served flow lives: flows/<domain>.flow.json."""
    return Paths(data).flows / f"{domain}.flow.json"


def staged_beside(path: Path) -> Path | None:
    """The flow a staged flow (`<name>.staged.flow.json`, `stretto stage`) was staged beside,
    or None when `path` is no staged flow."""
    return versions.staged_beside(path)


def staged_of(path: Path) -> Path:
    """Where `stretto stage` writes the flow staged beside `path`."""
    return versions.staged_path(path)


# --- sessions ---------------------------------------------------------------------------------


def episode_from_lines(path: Path, header: Any, lines: Iterable[Any]) -> Episode:
    """An episode from a header and wire lines read one at a time (the episode reader only
    iterates over `lines`, so a large log is never held whole as parsed lines)."""
    log = SessionLog(path=path, header=header, lines=lines)  # type: ignore[arg-type]
    return episode_from_log(log)


def write_tools(kinds: dict[str, str]) -> frozenset[str]:
    """The tools a session's listing (tool -> read / write / generic) marks as writes."""
    return frozenset(tool for tool, kind in kinds.items() if kind == WRITE)


def used_later(
    tool: str,
    arguments: dict,
    later: Sequence[ToolCall],
    writes: Container[str],
    made: Iterable[tuple[str, dict]],
) -> bool:
    """Whether the agent itself made the lookup `tool(arguments)` a decision chose: the one
    rule (stretto.offline.walk.agent_made, docs/formats.md §1.5) asked as evaluate asks it of
    a flow log's decision — `later` the agent's calls sent after the answer the run follows,
    bound arguments, until the agent's next write, and a call `made` already (by the agent or
    the flow, before that answer or earlier in the run) is not made again."""
    return agent_made(tool, arguments, later, match=BOUND, writes=writes, made=made) is not None


# --- flows ------------------------------------------------------------------------------------


def flow_summary(flow: dict, threshold: float) -> dict:
    """`stretto flow-show --format json` as data: sites, lookups (each with its verdict and
    `looks_up`), bindings, promotion."""
    return flowshow.summary(flow, threshold)


def promotion_evidence(entry: dict | None) -> str:
    return promote.promotion_evidence(entry)


def flow_diff(old: dict, new: dict) -> tuple[list[str], list[str]]:
    """(changes that need review, other changes)."""
    return flowdiff.diff(old, new)


def replay_totals(flow: dict, episodes: list[Episode], threshold: float) -> dict:
    """The replay's totals (turns, turns saved, detours, ...) of `episodes` with the flow as
    served at `threshold`, and the sites where it decided."""
    result = offline_replay.replay(flow, episodes, threshold=threshold)
    total = result.total()
    total["decider"] = result.decider
    return total


# --- a flow's life: versions, the staged flow, drift ------------------------------------------


HISTORY_SUFFIX = versions.HISTORY  # <name>.history/ beside a flow holds its versions


def flow_versions(path: Path) -> list[dict]:
    """`stretto flow-log --json`: the flow's committed versions and rollbacks, oldest first
    (ValueError when its history cannot be read)."""
    return versions.log(path)


def stage_report(path: Path) -> dict | None:
    """The last `stretto stage` report of the flow at `path` (totals, sites, what committing
    would change), or None when nothing is staged beside it."""
    report = stage.last_report(path)
    if report is None:
        return None
    out = report.as_json()
    out["markdown"] = stage.markdown(report)
    return out


def drift_series(flow: dict, episodes: list[Episode]) -> dict:
    """`stretto drift --json` with its defaults: the three series and the alarm's statistic
    per session in start order, the alarms, whether it sounds now."""
    return offline_drift.drift(flow, episodes).as_json()


def drift_facts(episode: Episode):
    """What drift scores of a session (its decision points and its steps' tools), read once."""
    return offline_drift.facts(episode)


def drift_from_facts(flow: dict, facts: list, episodes: list[Episode]) -> dict:
    """drift_series from the sessions' facts (drift_facts): the same answer, its parts done
    one session at a time by the caller (stretto.console.views.driftruns)."""
    return offline_drift.drift(flow, episodes, read=facts).as_json()


# --- the warehouse ----------------------------------------------------------------------------


class WarehouseUnavailable(Exception):
    """Why the warehouse cannot be read now."""


def warehouse_database(home: Path) -> Path:
    """The warehouse's DuckDB file (a new ingest rewrites it: its size and time say so)."""
    return Layout.at(home).database


def read_warehouse(home: Path, queries: dict[str, str]) -> dict[str, list[tuple]]:
    """The one place the console reads the warehouse: each query's rows, over views the
    warehouse builds in memory from its committed files (a reader never holds up an ingest).
    Raises WarehouseUnavailable (none yet, unreadable)."""
    # heavy: DuckDB and the warehouse's store load when a page first reads the warehouse
    import duckdb

    from warehouse import store
    from warehouse.datastore import StorageError

    try:
        con = store.open_catalogue(Layout.at(home))
        try:
            return {name: con.sql(sql).fetchall() for name, sql in queries.items()}
        finally:
            con.close()
    except (store.NoWarehouse, StorageError) as exc:  # none yet; the object store: one line
        raise WarehouseUnavailable(str(exc)) from None
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WarehouseUnavailable(f"the warehouse cannot be read now ({first})") from None
