"""The overview's figures: sessions, the agents' calls, the flows' lookups (made, and used
later by the agent), turns saved, by domain and by day.

A session is counted once, by its session id: from the warehouse (DuckDB over the Parquet,
read-only) when it holds the session, else from its log (the warehouse holds what was
ingested from logs/; shadow and explore sessions, and logs not ingested yet, are counted from
the logs). What the warehouse does not hold — lookups used, turns saved — comes from the logs
and from replaying each domain's newest flow on its recorded sessions. While an ingest holds
the warehouse, the last figures read from it are shown.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from stretto.console import adapter
from stretto.console.catalog import Catalog, FlowEntry
from stretto.console.flowview import Replays

# One row per session the warehouse holds: its domain, day, the agent's calls and lookups.
WAREHOUSE_SQL = {
    "sessions": "WITH s AS (SELECT session, any_value(domain) AS domain, "
    "CAST(min(day) AS VARCHAR) AS day FROM sessions GROUP BY session), "
    "c AS (SELECT session, count(*) FILTER (WHERE NOT by_proxy) AS calls, "
    "count(*) FILTER (WHERE by_proxy) AS lookups FROM calls GROUP BY session) "
    "SELECT s.session, s.domain, s.day, coalesce(c.calls, 0), coalesce(c.lookups, 0) "
    "FROM s LEFT JOIN c USING (session)"
}
COUNTED = ("sessions", "calls", "lookups")


class Overview:
    def __init__(self, catalog: Catalog, replays: Replays) -> None:
        self.catalog, self.replays = catalog, replays
        self.lock = threading.Lock()
        self.last_warehouse: tuple[tuple, dict] | None = None

    def _warehouse(self) -> tuple[dict | None, str | None]:
        """{session id: (domain, day, calls, lookups)} from the warehouse, or why not."""
        try:
            st = adapter.warehouse_database(self.catalog.data).stat()
            stamp: tuple | None = (st.st_size, st.st_mtime_ns)  # a new ingest changes it
        except OSError:
            stamp = None
        with self.lock:
            if stamp and self.last_warehouse and self.last_warehouse[0] == stamp:
                return self.last_warehouse[1], None
        try:
            rows = adapter.read_warehouse(self.catalog.data, WAREHOUSE_SQL)
        except adapter.WarehouseUnavailable as exc:
            with self.lock:  # unreadable for now: the figures read before, if any
                if stamp and self.last_warehouse:
                    return self.last_warehouse[1], None
            return None, str(exc)
        held = {
            session: (domain, day, calls, lookups)
            for session, domain, day, calls, lookups in rows["sessions"]
        }
        if stamp:
            with self.lock:
                self.last_warehouse = (stamp, held)
        return held, None

    def figures(self, threshold: float, costs: tuple[float, float]) -> dict:
        sessions = self.catalog.sessions()
        problems = [
            {"what": e.rel, "problem": e.summary["problem"]}
            for e in sessions
            if e.summary.get("problem")
        ]
        held, warehouse_problem = self._warehouse()
        if warehouse_problem:
            problems.append({"what": "warehouse", "problem": warehouse_problem})
        counted: dict[str, tuple] = dict(held or {})  # session id -> (domain, day, calls, lookups)
        from_logs = 0
        used: dict[str, int] = {}
        for entry in sessions:
            s = entry.summary
            if s.get("id") is None:
                continue
            used[s["domain"]] = used.get(s["domain"], 0) + s["lookups_used"]
            if s["id"] in counted:
                continue
            day = time.strftime("%Y-%m-%d", time.gmtime(s["started_unix_ms"] / 1000))
            counted[entry.key] = (s["domain"], day, s["calls"], s["lookups"])
            from_logs += 1
        cells: dict[tuple[str, str], dict] = {}
        for domain, day, calls, lookups in counted.values():
            cell = cells.setdefault((domain, day), dict.fromkeys(COUNTED, 0))
            cell["sessions"] += 1
            cell["calls"] += calls
            cell["lookups"] += lookups
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
            "source": "logs" if held is None else "warehouse",
            "from_logs": from_logs,
            "warehouse": str(adapter.warehouse_database(self.catalog.data)),
            "threshold": threshold,
            "totals": totals,
            "by_domain": by_domain,
            "by_day": [days[d] for d in sorted(days)],
            "problems": problems,
        }
