"""Which logs learning merges (warehouse/counts/merge.py): one host session's servers that overlap
in time, by name; and what a merged session looks like to learning (the warehouse, in this
process, from logs written here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import HEADER, LogBuilder
from tests.warehouse.helpers import ingest, learned
from warehouse.counts.learn import learn_flow
from warehouse.counts.merge import Log, plan
from warehouse.layout import Layout


def log(session: str, start: int, end: int, host: str | None, server: str | None) -> Log:
    return Log(session, start, end, host, server)


def test_one_host_sessions_overlapping_servers_are_one_unit() -> None:
    units = plan(
        [
            log("a", 0, 100, "h1", "github"),
            log("b", 50, 200, "h1", "docs"),
            log("c", 300, 400, "h1", "docs"),  # later: a unit of its own
            log("d", 10, 20, "h2", "docs"),  # another host session
            log("e", 5, 500, "h1", None),  # no server name: never merged
            log("f", 60, 70, None, "docs"),  # no host session: never merged
        ]
    )
    assert [[g.session for g in u] for u in units.units] == [
        ["a", "b"],
        ["e"],
        ["d"],
        ["f"],
        ["c"],
    ]
    assert units.warnings == [] and units.renamed
    assert units.unit_id(units.units[0]) == "a+b"


def test_two_copies_of_one_server_at_once_are_kept_apart_with_a_warning() -> None:
    units = plan([log("a", 0, 100, "h1", "docs"), log("b", 50, 80, "h1", "docs")])
    assert [[g.session for g in u] for u in units.units] == [["a"], ["b"]]
    (warning,) = units.warnings
    assert "host session h1" in warning and "docs" in warning and "not merged" in warning


def test_logs_without_server_names_are_learned_as_before() -> None:
    units = plan([log("a", 0, 100, "h1", None), log("b", 50, 80, "h1", None)])
    assert not units.renamed and [[g.session for g in u] for u in units.units] == [["a"], ["b"]]


def server_log(session: str, server: str, start: int, host: str = "h1") -> LogBuilder:
    b = LogBuilder()
    b.lines[0] = {
        **HEADER,
        "session": session,
        "started_unix_ms": start,
        "domain": "work",
        "host_session": host,
        "server_name": server,
    }
    return b


def tools(*names: str) -> dict:
    return {
        "tools": [
            {
                "name": n,
                "annotations": {"readOnlyHint": True},
                "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
            }
            for n in names
        ]
    }


def host_session(folder: Path, k: int, searches: int = 1) -> None:
    """Host session h<k>: a github and a docs server's logs, overlapping (docs 5 ms later)."""
    start = 1_000_000 * (k + 1)
    gh = server_log(f"gh-{k}", "github", start, host=f"h{k}")
    docs = server_log(f"docs-{k}", "docs", start + 5, host=f"h{k}")
    gh._add(0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
    gh._add(1, "server", {"jsonrpc": "2.0", "id": 0, "result": tools("get_issue")})
    docs._add(0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
    docs._add(1, "server", {"jsonrpc": "2.0", "id": 0, "result": tools("search")})
    # the same conversation in both logs (one --context file): learned once
    for b in (gh, docs):
        b.say(50, "user", f"look at issue {k}")
    gh.client_call(100, 1, "get_issue", q=f"issue-{k}")
    gh.result(101, 1, json.dumps({"topic": f"topic-{k}"}))
    # docs' clock started 5 ms later: its t_ms 200 is 205 on github's
    docs.client_call(200, 1, "search", q=f"topic-{k}").result(201, 1, "found")
    for n in range(1, searches):  # more searches, later
        docs.client_call(200 + 10 * n, 1 + n, "search", q=f"more-{n}").result(
            201 + 10 * n, 1 + n, ""
        )
    gh.client_call(400, 2, "get_issue", q=f"issue-{k}b").result(401, 2, "{}")
    for b in (gh, docs):
        name = f"{b.lines[0]['session']}.jsonl"
        (folder / name).write_text("".join(json.dumps(x) + "\n" for x in b.lines))


def test_a_merged_session_interleaves_its_servers_by_time(tmp_path: Path) -> None:
    home = tmp_path / "home"
    folder = home / "logs" / "work"
    folder.mkdir(parents=True)
    for k in range(3):
        host_session(folder, k)
    ingest(home)
    said: list[str] = []
    flow = learn_flow(Layout.at(home), "work", only_domain=True, say=said.append)
    assert [s for s in said if s.startswith("warning")] == []  # the others: progress
    assert flow["provenance"]["habit_episodes"] == 3
    assert set(flow["manifest"]["tools"]) == {"github::get_issue", "docs::search"}
    sites = {(s["after"], s["failed"]): dict(s["lookups"]) for s in flow["sites"]["next"]}
    assert sites[("github::get_issue", False)] == {"docs::search": 3}
    assert sites[("docs::search", False)] == {"github::get_issue": 3}
    (query,) = [s for s in flow["bindings"]["sources"] if s["tool"] == "docs::search"]
    assert [(f["source"], f["path"]) for f in query["found"]] == [("github::get_issue", "$.topic")]

    # what learning reads: one session per host session, the conversation once, in time order
    from warehouse import store
    from warehouse.counts import merge

    layout = Layout.at(home)
    con = store.open_catalogue(layout)
    try:
        sessions = [r[0] for r in con.execute("SELECT session FROM sessions").fetchall()]
        units = merge.plan(merge.logs_to_learn(con, sessions))
        merge.apply(con, layout, units)
        unit = "gh-0+docs-0"
        context = con.execute("SELECT content FROM context WHERE session = ?", [unit]).fetchall()
        steps = con.execute(
            "SELECT action FROM steps WHERE session = ? ORDER BY step", [unit]
        ).fetchall()
        turns = con.execute(
            "SELECT tool, turn, sent_ms FROM calls WHERE session = ? ORDER BY sent_seq", [unit]
        ).fetchall()
    finally:
        con.close()
    assert context == [("look at issue 0",)]
    assert [s for (s,) in steps] == ["github::get_issue", "docs::search", "github::get_issue"]
    assert turns == [
        ("github::get_issue", 0, 100),
        ("docs::search", 1, 205),
        ("github::get_issue", 2, 400),
    ]


@pytest.mark.slow  # several ingest runs
def test_merged_sessions_are_planned_as_units_whose_parts_are_kept_until_a_log_changes(
    tmp_path: Path,
) -> None:
    from warehouse import store
    from warehouse.counts.learn import learned_units

    home = tmp_path / "home"
    folder = home / "logs" / "work"
    folder.mkdir(parents=True)
    for k in range(2):
        host_session(folder, k)
    ingest(home)
    layout = Layout.at(home)
    con = store.open_catalogue(layout)
    try:
        plan = learned_units(con, layout, "work", None, None, lambda m: None)
        ids = dict(con.execute("SELECT session, ingest_id FROM sessions").fetchall())
    finally:
        con.close()
    assert plan.order == ["gh-0+docs-0", "gh-1+docs-1"] and len(plan.parts) == 1
    # the planning view holds the units only; a unit's ingest run is its own, not a log's
    assert set(ids) == {"gh-0+docs-0", "gh-1+docs-1"}
    assert all(i.startswith("merged-") for i in ids.values())

    said: list[str] = []
    first = learned(layout, "work", say=said.append)
    assert any(s.startswith("counting 1 of 1 parts") for s in said)
    said.clear()
    again = learned(layout, "work", say=said.append)
    assert again == first and not [s for s in said if s.startswith("counting")]

    host_session(folder, 1, searches=2)  # one member log of a unit changes: counted again
    ingest(home)
    said.clear()
    changed = learned(layout, "work", say=said.append)
    assert any(s.startswith("counting 1 of 1 parts") for s in said)
    assert changed["provenance"]["steps"] == first["provenance"]["steps"] + 1
