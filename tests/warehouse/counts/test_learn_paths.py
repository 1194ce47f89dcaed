"""Every binding path learning writes reads back: keys with dots, quotes, brackets, spaces,
backslashes, jsonpath's reserved words and non-ASCII text."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from stretto.model.binding import Rules, SessionState, parse_path, pick, values_at
from stretto.model.flow import load_flow, write_flow
from tests.builders import HEADER, LogBuilder
from tests.warehouse.helpers import ingest
from warehouse.counts.learn import learn_flow
from warehouse.layout import Layout
from warehouse.sql import statements as sql_statements

KEYS = [
    "plain",
    "a.b",
    'q"uote',
    "br[0]acket",
    "[7]",
    "sp ace",
    "héllo",
    "日本語",
    "emoji😀",
    "back\\slash",
    'mix."[1]\\ ü',
    "where",
    "wherenot",
    "$",
    "*",
    "'single'",
    "x]y",
    "1abc",
    "",
    "new\nline",
]
SESSIONS = 3


def value(n: int, session: int) -> str:
    return f"val{n:02d}x{session}"


def search_result(session: int) -> str:
    """Each key holds a list of objects holding the key again; the value sits two deep."""
    return json.dumps(
        {k: [{k: value(n, session), "other": "noise"}] for n, k in enumerate(KEYS)},
        ensure_ascii=False,
    )


def listing_result(session: int) -> str:
    return json.dumps({"the ids.[*]": [f"L{session}-{j}" for j in range(3)]}, ensure_ascii=False)


def session_log(session: int) -> LogBuilder:
    b = LogBuilder()
    b.lines[0] = {**HEADER, "session": f"p-{session}", "started_unix_ms": session, "domain": "p"}
    tools = ["search", "listing", "get_many"] + [f"get_{n:02d}" for n in range(len(KEYS))]
    b._add(0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
    b._add(
        1,
        "server",
        {
            "jsonrpc": "2.0",
            "id": 0,
            "result": {
                "tools": [{"name": t, "annotations": {"readOnlyHint": True}} for t in tools]
            },
        },
    )
    b.client_call(10, 1, "search", q="x").result(11, 1, search_result(session))
    for n in range(len(KEYS)):
        call = 100 + n
        b.client_call(1000 + 10 * n, call, f"get_{n:02d}", id=value(n, session))
        b.result(1001 + 10 * n, call, "{}")
    b.client_call(5000, 2, "listing").result(5001, 2, listing_result(session))
    b.client_call(6000, 3, "get_many", ids=[f"L{session}-{j}" for j in range(3)])
    b.result(6001, 3, "[]")
    return b


def test_every_learned_path_reads_back(tmp_path: Path) -> None:
    home = tmp_path / "home"
    folder = home / "logs/p"
    folder.mkdir(parents=True)
    for s in range(SESSIONS):
        lines = session_log(s).lines
        (folder / f"p-{s}.jsonl").write_text(
            "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
        )
    ingest(home)
    flow = learn_flow(Layout.at(home), "p")
    write_flow(flow, tmp_path / "p.flow.json")  # validated: every path parses
    flow = load_flow(tmp_path / "p.flow.json")

    sources = {e["tool"]: e for e in flow["bindings"]["sources"]}
    document = json.loads(search_result(0))
    for n, key in enumerate(KEYS):
        (hit,) = sources[f"get_{n:02d}"]["found"]
        assert (hit["source"], hit["count"]) == ("search", SESSIONS), key
        steps = parse_path(hit["path"])
        assert steps == [key, None, key], (key, hit["path"])
        assert values_at(document, steps) == [(value(n, 0), ["noise"])], key
    (lists,) = flow["bindings"]["lists"]
    assert lists["found"] == [{"source": "listing", "path": '$."the ids.[*]"[*]', "count": 3}]

    # and the proxy's binding takes the values at those paths
    rules = Rules.from_flow(flow["bindings"])
    state = SessionState()
    state.add_result("search", True, search_result(9))
    state.add_result("listing", True, listing_result(9))
    for n in range(len(KEYS)):
        assert pick(rules, state, f"get_{n:02d}").arguments == {"id": value(n, 9)}
    assert pick(rules, state, "get_many").arguments == {"ids": ["L9-0", "L9-1", "L9-2"]}


KEY = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(KEY, min_size=1, max_size=4))
def test_the_path_of_any_key_reads_back(keys: list[str]) -> None:
    """The path DuckDB's json_tree gives a leaf, as learning rewrites it, is read by jsonpath-ng
    into the keys that lead there (each inside a one-element list, to exercise [*])."""
    document: object = "leaf"
    for key in reversed(keys):
        document = [{key: document}]
    text = json.dumps({"top": document}, ensure_ascii=False)
    con = path_connection()
    ((path,),) = con.execute(
        "SELECT binding_path(fullkey) FROM json_tree(?) WHERE type = 'VARCHAR'", [text]
    ).fetchall()
    steps = parse_path(path)
    assert steps == ["top", *[s for key in keys for s in (None, key)]], path
    assert values_at(json.loads(text), steps) == [("leaf", [])]


@functools.cache
def path_connection():
    import duckdb

    con = duckdb.connect()
    con.execute(dict(sql_statements("bindings"))["binding_path"])
    return con
