"""The overview's figures: sessions, the agents' calls, the flows' lookups (made, and used
later by the agent), turns saved, by domain and by day.

Counts come from the warehouse (DuckDB over the Parquet, opened read-only) when there is
one, else from the logs. What the warehouse does not hold — lookups used, turns saved — comes
from the logs and from replaying each domain's newest flow on its recorded sessions. While
an ingest holds the warehouse, the last figures read from it are shown (or the logs').
"""

from __future__ import annotations

import threading
import time
from typing import Any

from stretto.console import adapter
from stretto.console.catalog import Catalog, FlowEntry
from stretto.console.flowview import Replays

WAREHOUSE_SQL = {
    "sessions": "SELECT domain, CAST(day AS VARCHAR) AS day, count(*) AS n "
    "FROM sessions GROUP BY ALL",
    "calls": "SELECT domain, CAST(day AS VARCHAR) AS day, "
    "count(*) FILTER (WHERE NOT by_proxy) AS calls, count(*) FILTER (WHERE by_proxy) AS lookups "
    "FROM calls GROUP BY ALL",
}


class Overview:
    def __init__(self, catalog: Catalog, replays: Replays) -> None:
        self.catalog, self.replays = catalog, replays
        self.lock = threading.Lock()
        self.last_warehouse: tuple[tuple, dict] | None = None

    def _warehouse(self) -> tuple[dict | None, str | None]:
        """{(domain, day): {sessions, calls, lookups}} from the warehouse, or why not."""
        database = adapter.warehouse_database(self.catalog.data)
        try:
            st = database.stat()
        except OSError:
            return None, f"no warehouse at {database} yet: run an ingest job"
        stamp = (st.st_size, st.st_mtime_ns)
        with self.lock:
            if self.last_warehouse and self.last_warehouse[0] == stamp:
                return self.last_warehouse[1], None
        import duckdb

        if adapter.warehouse_busy(self.catalog.data):
            with self.lock:  # an ingest is writing: the figures read before it, if any
                if self.last_warehouse:
                    return self.last_warehouse[1], None
            return None, "an ingest is writing the warehouse; counts from the logs meanwhile"
        try:
            con = adapter.read_only_warehouse(self.catalog.data)
            if con is None:
                return None, f"no warehouse at {database} yet: run an ingest job"
            try:
                rows = {name: con.sql(sql).fetchall() for name, sql in WAREHOUSE_SQL.items()}
            finally:
                con.close()
        except duckdb.Error as exc:
            with self.lock:
                if self.last_warehouse:  # an ingest is writing: the figures read before it
                    return self.last_warehouse[1], None
            return None, f"the warehouse cannot be read now ({str(exc).splitlines()[0]})"
        cells: dict = {}
        for domain, day, n in rows["sessions"]:
            cells.setdefault((domain, day), {"sessions": 0, "calls": 0, "lookups": 0})
            cells[(domain, day)]["sessions"] = n
        for domain, day, calls, lookups in rows["calls"]:
            cell = cells.setdefault((domain, day), {"sessions": 0, "calls": 0, "lookups": 0})
            cell["calls"], cell["lookups"] = calls, lookups
        with self.lock:
            self.last_warehouse = (stamp, cells)
        return cells, None

    def figures(self, threshold: float, costs: tuple[float, float]) -> dict:
        sessions = self.catalog.sessions()
        problems = [
            {"what": e.rel, "problem": e.summary["problem"]}
            for e in sessions
            if e.summary.get("problem")
        ]
        from_logs: dict = {}
        used: dict[str, int] = {}
        for entry in sessions:
            s = entry.summary
            if s.get("id") is None:
                continue
            day = time.strftime("%Y-%m-%d", time.gmtime(s["started_unix_ms"] / 1000))
            cell = from_logs.setdefault(
                (s["domain"], day), {"sessions": 0, "calls": 0, "lookups": 0}
            )
            cell["sessions"] += 1
            cell["calls"] += s["calls"]
            cell["lookups"] += s["lookups"]
            used[s["domain"]] = used.get(s["domain"], 0) + s["lookups_used"]
        cells, warehouse_problem = self._warehouse()
        source = "warehouse" if cells is not None else "logs"
        if cells is None:
            cells = from_logs
            if warehouse_problem:
                problems.append({"what": "warehouse", "problem": warehouse_problem})
        flows = self.catalog.flows()
        for flow_entry in flows:
            if flow_entry.error:
                problems.append({"what": flow_entry.name, "problem": flow_entry.error})
        newest: dict[str, FlowEntry] = {}
        for flow_entry in sorted(flows, key=lambda f: f.modified_unix_ms):
            if flow_entry.flow is not None:
                newest[flow_entry.flow["manifest"]["domain"]] = flow_entry
        domains = sorted({d for d, _ in cells} | set(newest))
        by_domain = []
        for domain in domains:
            row: dict[str, Any] = {"domain": domain, "sessions": 0, "calls": 0, "lookups": 0}
            for (d, _), cell in cells.items():
                if d == domain:
                    for k in ("sessions", "calls", "lookups"):
                        row[k] += cell[k]
            row["lookups_used"] = used.get(domain, 0)
            flow = newest.get(domain)
            row["flow"] = flow.name if flow else None
            row["replay"] = self.replays.figures(flow, threshold, costs) if flow else None
            by_domain.append(row)
        days: dict[str, dict] = {}
        for (_, day), cell in cells.items():
            row = days.setdefault(day, {"day": day, "sessions": 0, "calls": 0, "lookups": 0})
            for k in ("sessions", "calls", "lookups"):
                row[k] += cell[k]
        totals = {k: sum(r[k] for r in by_domain) for k in ("sessions", "calls", "lookups")}
        totals["lookups_used"] = sum(used.values())
        totals["turns_saved"] = sum((r["replay"] or {}).get("turns_saved", 0) for r in by_domain)
        totals["turns"] = sum((r["replay"] or {}).get("turns", 0) for r in by_domain)
        totals["flows"] = sum(f.flow is not None for f in flows)
        return {
            "source": source,
            "warehouse": str(adapter.warehouse_database(self.catalog.data)),
            "threshold": threshold,
            "totals": totals,
            "by_domain": by_domain,
            "by_day": [days[d] for d in sorted(days)],
            "problems": problems,
        }
