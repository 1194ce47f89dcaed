"""Every call the console makes into the rest of stretto, in one place.

The layers below are being reorganized (the home and its paths, the offline walk, the
warehouse's read side); when an API moves, this module is the one to change. Nothing else in
stretto.console imports stretto.logs, stretto.model, stretto.offline or warehouse.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stretto import __version__ as VERSION  # noqa: F401 - re-exported for the console
from stretto.logs.episode import (  # noqa: F401 - re-exported
    Episode,
    ToolResult,
    User,
    call_id_text,
    context_message,
    episode_from_log,
    read_episode,
)
from stretto.logs.sessionlog import (  # noqa: F401 - re-exported
    SIDE_FILE_SUFFIXES,
    LogError,
    SessionLog,
    is_session_log,
    parse_header,
    parse_wire_line,
)
from stretto.model.decide import DEFAULT_THRESHOLD  # noqa: F401 - re-exported
from stretto.model.flow import FlowError, load_flow  # noqa: F401 - re-exported
from stretto.offline import replay as offline_replay
from stretto.offline import review, search

DEFAULT_COSTS: tuple[float, float] = search.DEFAULT_COSTS


def default_home() -> Path:
    """The data directory when none is given: $STRETTO_HOME, else ~/.stretto."""
    from stretto.home import default_home as home

    return home()


def episode_from_lines(path: Path, header: Any, lines: Iterable[Any]) -> Episode:
    """An episode from a header and wire lines read one at a time (the episode reader only
    iterates over `lines`, so a large log is never held whole as parsed lines)."""
    log = SessionLog(path=path, header=header, lines=lines)  # type: ignore[arg-type]
    return episode_from_log(log)


def flow_summary(flow: dict, threshold: float) -> dict:
    """`stretto flow-show --format json` as data: sites, lookups, verdicts, bindings."""
    return review.summary(flow, threshold)


def looks_up(lookup: dict) -> bool:
    """Whether a lookup of flow_summary's sites would be made (its verdict says so)."""
    return lookup["verdict"].startswith("looks up")


def promotion_evidence(entry: dict | None) -> str:
    return review.promotion_evidence(entry)


def flow_diff(old: dict, new: dict) -> tuple[list[str], list[str]]:
    """(changes that need review, other changes)."""
    return review.diff(old, new)


def replay_totals(flow: dict, episodes: list[Episode], threshold: float) -> dict:
    """The replay's totals (turns, turns saved, detours, ...) of `episodes` with the flow as
    served at `threshold`, and the sites where it decided."""
    result = offline_replay.replay(flow, episodes, threshold=threshold)
    total = result.total()
    total["decider"] = result.decider
    return total


def warehouse_busy(home: Path) -> bool:
    """Whether an ingest run holds the warehouse's lock now (then a reader should not open
    the DuckDB file: DuckDB lets one process write it only while no other has it open)."""
    import fcntl

    from warehouse.layout import Layout

    try:
        fd = os.open(Layout.at(home).lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the shared lock at once
    return False


def read_only_warehouse(home: Path):
    """A read-only DuckDB connection to the warehouse, or None when there is none. Raises
    duckdb.Error when it cannot be opened."""
    from warehouse import store
    from warehouse.layout import Layout

    layout = Layout.at(home)
    try:
        # views over the committed Parquet in memory: a reader never holds up an ingest
        return store.open_catalogue(layout)
    except store.NoWarehouse:
        return None


def warehouse_database(home: Path) -> Path:
    from warehouse.layout import Layout

    return Layout.at(home).database
