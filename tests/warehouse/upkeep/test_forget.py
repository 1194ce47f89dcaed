"""warehouse.upkeep.forget: sessions taken out of every table of a real warehouse in one commit,
the other sessions of the same partitions kept as they were."""

from __future__ import annotations

from pathlib import Path

from tests.builders import shop_log, write_logs
from tests.warehouse.helpers import ingest, rows
from warehouse import store
from warehouse.ingest.run import new_ingest_id
from warehouse.layout import TABLES, Layout
from warehouse.upkeep.forget import forget_sessions


def counts(home: Path) -> dict[str, dict[str, int]]:
    """Rows per table and session."""
    return {
        table: {
            r["session"]: r["n"]
            for r in rows(home, f"SELECT session, count(*) AS n FROM {table} GROUP BY 1")
        }
        for table in TABLES
    }


def test_forgotten_sessions_leave_every_table_and_the_others_stay(tmp_path: Path) -> None:
    home = tmp_path / "home"
    logs = []
    for i in range(6):
        log = shop_log(i)
        log.lines[0]["agent_model"] = "scripted" if i % 2 else "mine"
        logs.append(log)
    write_logs(home / "logs" / "shop", logs)  # one domain, one day: the same partitions
    ingest(home)
    before = counts(home)
    assert set(before["sessions"]) == {f"s-{i}" for i in range(6)}
    layout = Layout.at(home)
    gone = ["s-1", "s-3", "s-5", "s-404"]  # one never ingested: nothing to do for it
    with store.ingest_lock(layout, 0, print):
        done = forget_sessions(layout, gone, new_ingest_id())
    assert done["sessions"] == 3 and done["files retired"] > 0
    after = counts(home)
    for table, by_session in before.items():
        kept = {s: n for s, n in by_session.items() if s not in gone}
        assert after[table] == kept, table  # every row of the others, none of theirs
    assert rows(home, "SELECT DISTINCT header_agent_model AS m FROM sessions") == [{"m": "mine"}]
    # the warehouse goes on: new logs are ingested beside what was kept
    write_logs(home / "logs" / "shop", [shop_log(10)])
    ingest(home)
    assert sorted(counts(home)["sessions"]) == ["s-0", "s-10", "s-2", "s-4"]


def test_forgetting_in_no_warehouse_or_nothing_does_nothing(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path / "home")
    assert forget_sessions(layout, ["s-1"], new_ingest_id()) == {
        "sessions": 0,
        "rows kept": 0,
        "files retired": 0,
    }
    assert not (tmp_path / "home").exists()
