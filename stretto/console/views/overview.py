"""The overview's figures: sessions, the agents' calls, the flows' lookups (made; answered,
or asked again by the agent), turns saved, by domain and by day.

One source of truth: every figure is counted from the session logs as the Sessions page
lists them (the catalog's summaries, the same reader `stretto sessions` uses), each session
once by its id; a log that cannot be read is a problem, not a session. The warehouse is
only compared with the logs: when it misses logs under logs/ (not ingested yet) it is
stale, and the page offers an ingest; sessions it holds whose logs are gone (trashed,
removed: ingest never forgets a session) are said, not counted. Turns saved replay each
domain's served flow (flows/<domain>.flow.json; a staged flow never stands for it) on its
recorded sessions. While an ingest holds the warehouse, the last comparison is shown.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from stretto.console import adapter
from stretto.console.views.catalog import Catalog, FlowEntry
from stretto.console.views.flowview import Replays

WAREHOUSE_SQL = {"sessions": "SELECT DISTINCT session FROM sessions"}
COUNTED = ("sessions", "calls", "lookups", "lookups_used", "lookups_answered", "turns")


class Overview:
    def __init__(self, catalog: Catalog, replays: Replays) -> None:
        self.catalog, self.replays = catalog, replays
        self.lock = threading.Lock()
        self.last_warehouse: tuple[tuple, set[str]] | None = None

    def _warehouse(self) -> tuple[set[str] | None, str | None]:
        """The session ids the warehouse holds, or why they cannot be read."""
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
            with self.lock:  # unreadable for now: the ids read before, if any
                if stamp and self.last_warehouse:
                    return self.last_warehouse[1], None
            return None, str(exc)
        held = {session for (session,) in rows["sessions"]}
        if stamp:
            with self.lock:
                self.last_warehouse = (stamp, held)
        return held, None

    def _compare(self, sessions: list) -> dict:
        """The warehouse against the logs: `held` (sessions it holds), `not_ingested` (logs
        under logs/ it does not hold), `gone` (sessions it holds with no log), `stale`."""
        held, problem = self._warehouse()
        out: dict[str, Any] = {"path": str(adapter.warehouse_database(self.catalog.data))}
        if held is None:
            return out | {"readable": False, "problem": problem, "stale": False}
        ids = {e.summary["id"] for e in sessions if e.summary.get("id") is not None}
        ingestable = {
            e.summary["id"]
            for e in sessions
            if e.summary.get("id") is not None
            and any(rel.startswith("logs/") for rel in (e.rel, *e.copies))
        }
        not_ingested = sorted(ingestable - held)
        gone = sorted(held - ids)
        return out | {
            "readable": True,
            "held": len(held),
            "not_ingested": len(not_ingested),
            "gone": len(gone),
            "stale": bool(not_ingested),
        }

    def figures(self, threshold: float, costs: tuple[float, float]) -> dict:
        sessions = self.catalog.sessions()
        problems = [
            {"what": e.rel, "problem": e.summary["problem"]}
            for e in sessions
            if e.summary.get("problem")
        ]
        warehouse = self._compare(sessions)
        if warehouse.get("problem"):
            problems.append({"what": "warehouse", "problem": warehouse["problem"]})
        cells: dict[tuple[str, str], dict] = {}
        for entry in sessions:
            s = entry.summary
            if s.get("id") is None:  # unreadable: listed as a problem above
                continue
            day = time.strftime("%Y-%m-%d", time.gmtime(s["started_unix_ms"] / 1000))
            cell = cells.setdefault((s["domain"], day), dict.fromkeys(COUNTED, 0))
            cell["sessions"] += 1
            for k in COUNTED[1:]:
                cell[k] += s.get(k, 0)
        flows = self.catalog.flows()
        for flow_entry in flows:
            if flow_entry.error:
                problems.append({"what": flow_entry.name, "problem": flow_entry.error})
        chosen = replayed_flows(flows)
        domains = sorted({d for d, _ in cells} | set(chosen))
        by_domain = []
        for domain in domains:
            row: dict[str, Any] = {"domain": domain} | dict.fromkeys(COUNTED, 0)
            for (d, _), cell in cells.items():
                if d == domain:
                    for k in COUNTED:
                        row[k] += cell[k]
            flow = chosen.get(domain)
            row["flow"] = flow.name if flow else None
            row["flow_served"] = bool(flow and flow.role == "served")
            row["replay"] = self.replays.figures(flow, threshold, costs) if flow else None
            by_domain.append(row)
        days: dict[str, dict] = {}
        for (_, day), cell in cells.items():
            row = days.setdefault(day, {"day": day, "sessions": 0, "calls": 0, "lookups": 0})
            for k in ("sessions", "calls", "lookups"):
                row[k] += cell[k]
        totals = {k: sum(r[k] for r in by_domain) for k in COUNTED}
        totals["llm_turns"] = totals.pop("turns")  # the sessions' own; `turns`: the replay's
        totals["turns_saved"] = sum((r["replay"] or {}).get("turns_saved", 0) for r in by_domain)
        totals["turns"] = sum((r["replay"] or {}).get("turns", 0) for r in by_domain)
        totals["flows"] = sum(f.flow is not None for f in flows)
        totals["staged_flows"] = sum(f.role == "staged" for f in flows)
        return {
            "source": "logs",
            "warehouse": warehouse,
            "threshold": threshold,
            "totals": totals,
            "by_domain": by_domain,
            "by_day": [days[d] for d in sorted(days)],
            "problems": problems,
        }


def replayed_flows(flows: list[FlowEntry]) -> dict[str, FlowEntry]:
    """Per domain, the flow whose replay the overview shows: the served one
    (flows/<domain>.flow.json); without one, the newest valid flow that is not staged. A
    staged flow (`stretto stage`) is a candidate under review: it never stands for a domain."""
    served: dict[str, FlowEntry] = {}
    newest: dict[str, FlowEntry] = {}
    for entry in sorted(flows, key=lambda f: f.modified_unix_ms):
        if entry.flow is None or entry.role == "staged":
            continue
        domain = entry.flow["manifest"]["domain"]
        (served if entry.role == "served" else newest)[domain] = entry
    return newest | served
