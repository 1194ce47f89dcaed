"""Ingest's rows do not change when its code does: a fixed set of logs (the synthetic archive's
kind, the reference's own, and lines that take every rule's rarer branches) gives, table by
table, the rows and schema recorded in ingest_rows.json — written by the ingest before it was
made faster (issue 14). A change that means to change rows writes the file again:

    STRETTO_WRITE_INGEST_ROWS=1 .venv/bin/pytest tests/warehouse/ingest/test_ingest_rows.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from bench.synth_logs import generate
from tests.conftest import REFERENCE_HOME
from tests.warehouse.faults import FAULTS, header
from warehouse import store
from warehouse.ingest.discover import discover
from warehouse.ingest.run import ingest_plan
from warehouse.layout import Layout

RECORDED = Path(__file__).with_name("ingest_rows.json")
TABLES = ("sessions", "messages", "calls", "context", "tools", "quarantine")


def line(t_ms: int, sender: str, message: object) -> str:
    return json.dumps({"t_ms": t_ms, "from": sender, "message": message})


# A session of rare shapes, first as json.dumps writes it (not the proxy's own form), then the
# same lines in the proxy's form, with more that only that form reaches.
TRICKY = [
    line(
        0,
        "client",
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"clientInfo": {"name": "hosty"}},
        },
    ),
    '{"t_ms":1,"from":"client","message":{"jsonrpc":"2.0","id":1,"method":"tools/list"}}',
    line(
        2,
        "server",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {
                "tools": [
                    {
                        "name": "a",
                        "description": "Reads. More.",
                        "inputSchema": {"type": "object"},
                        "annotations": {"readOnlyHint": True},
                    },
                    {"name": "b"},
                ]
            },
        },
    ),
    line(3, "context", {"role": "user", "content": "find 12345 please"}),
    line(
        4,
        "client",
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "a", "arguments": {"q": "12345"}},
        },
    ),
    line(
        5,
        "server",
        {
            "jsonrpc": "2.0",
            "id": 2,
            "result": {
                "content": [
                    {"type": "text", "text": 'x "y" \u00e9 \U0001f600'},
                    {"type": "text", "text": 5},
                    {"type": "image", "data": "zz"},
                    {"type": "text", "text": "second"},
                ]
            },
        },
    ),
    line(
        6,
        "client",
        [
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "b", "arguments": {"v": "second"}},
            },
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "a"}},
            7,
            "s",
        ],
    ),
    line(
        7,
        "server",
        [{"jsonrpc": "2.0", "id": 3, "result": None}, {"jsonrpc": "2.0", "id": 4, "error": "boom"}],
    ),
    line(8, "server", {"jsonrpc": "2.0", "id": 4, "error": {"code": 1, "message": "late"}}),
    line(
        9,
        "client",
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "a", "arguments": [1]},
        },
    ),
    line(
        10,
        "client",
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}},
    ),
    line(
        11,
        "proxy",
        {
            "jsonrpc": "2.0",
            "id": "p1",
            "method": "tools/call",
            "params": {"name": "b", "arguments": {}},
        },
    ),
    line(
        12,
        "proxy",
        {
            "jsonrpc": "2.0",
            "id": "p1",
            "result": {"structuredContent": {"k": [1, 2]}, "isError": True},
        },
    ),
    line(13, "context", {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}),
    line(14, "context", {"role": "assistant", "content": None}),
    line(15, "context", {"role": 5, "content": "x"}),
    line(16, "context", "just a string"),
    line(17, "server", {"jsonrpc": "2.0", "id": 6, "result": {"content": "notalist"}}),
    line(
        18,
        "server",
        {
            "jsonrpc": "2.0",
            "id": 2,
            "result": {"content": [{"type": "text", "text": "dup answer"}]},
        },
    ),
    '{"t_ms":20,"from":"client","message":{"jsonrpc":"2.0","id":8,"method":"tools/call",'
    '"params":{"name":"a","arguments":{"z":"\\ud800"}}}}',
    '{"t_ms":21,"from":"server","message":{"jsonrpc":"2.0","id":8,"result":{"content":'
    '[{"type":"text","text":"\\udc00 ok"}]}}}',
    '{"t_ms":22,"from":"client","message":null}',
    '{"t_ms":23,"from":"client","message":{"a":1},"raw":"x"}',
    '{"t_ms":-1,"from":"client","message":{}}',
    '{"t_ms":24,"from":"nobody","message":{}}',
    '{"t_ms":25,"from":"client","raw":5}',
    '{"t_ms":26,"from":"client","raw":"plain raw"}',
    '{"from":"client","t_ms":27,"message":{"jsonrpc":"2.0","id":9,"method":"ping"}}',
    "[1,2]",
    "not json at all",
    "   ",
    "",
    '{"t_ms":28,"from":"server","message":{"jsonrpc":"2.0","id":9,"result":{}}}',
    '{"t_ms":29,"from":"server","message":{"jsonrpc":"2.0","id":9,"result":{"content":[]}}}}',
    '{"t_ms":30,"from":"client","message":{"jsonrpc":"2.0","id":10,"method":"tools/call",'
    '"params":{"name":"a","arguments":{"q":"caf\u00e9 \u65e5\u672c"}}}}',
    '{"t_ms":31,"from":"server","message":{"jsonrpc":"2.0","id":10,"result":{"content":'
    '[{"type":"text","text":"\u65e5\u672c\u8a9e text"}]}}}',
]
PROXY_FORM_ONLY = [
    '{"t_ms":50,"from":"client","message":5}',
    '{"t_ms":51,"from":"context","message":"s"}',
    '{"t_ms":52,"from":"context","message":null}',
    '{"t_ms":53,"from":"client","message":1,"raw":"a"}',
    '{"t_ms":54,"from":"client","message":[]}',
    '{"t_ms":55,"from":"server","message":{"jsonrpc":"2.0","id":2,"result":{"content":'
    '[{"type":"text","text":null},{"type":"text"}]}}}',
    '{"t_ms":99999999999999999999,"from":"client","message":[1]}',
    '{"t_ms":56,"from":"client","message":{"id":1,"id":2,"method":"tools/call",'
    '"params":{"name":"a"}}}',
    '{"t_ms":57,"from":"context","message":{"role":"user","content":{"x":1}}}',
    '{"t_ms":58,"from":"context","message":{"role":"assistant","content":"  "}}',
    # a text that is not a string, alone and with its key escaped (not a text part)
    '{"t_ms":59,"from":"server","message":{"jsonrpc":"2.0","id":2,"result":{"content":'
    '[{"type":"text","text" : {"a":1}}],"structuredContent":{"s":1}}}}',
    '{"t_ms":60,"from":"server","message":{"jsonrpc":"2.0","id":2,"result":{"content":'
    '[{"type":"text","te\\u0078t":7},{"type":"text","text":"kept"}]}}}',
    '{"t_ms":61,"from":"server","message":{"jsonrpc":"2.0","id":2,"result":{"content":'
    '[{"type":"te\\u0078t","text":"escaped type"}]}}}',
]


def proxy_form(text: str) -> str:
    if not text.startswith('{"t_ms": '):
        return text
    return json.dumps(json.loads(text), separators=(",", ":"))


def write_corpus(logs: Path) -> None:
    generate(logs / "synth", 40, 800)
    for name, (content, *_) in FAULTS.items():
        (logs / "x").mkdir(parents=True, exist_ok=True)
        (logs / f"x/{name}.jsonl").write_bytes(content)
    for source in sorted((REFERENCE_HOME / "logs").rglob("*.jsonl")):
        folder = logs / "ref" / source.parent.name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, folder / source.name)
    trick = logs / "trick"
    trick.mkdir()
    first = header("tricky", domain="trick", agent_model="m1", reward=0.5, extra={"a": 1})
    torn = '{"t_ms":40,"from":"client","message":{"jsonrpc"'
    (trick / "tricky.jsonl").write_text(first.decode() + "\n" + "\n".join(TRICKY) + "\n" + torn)
    compact = [proxy_form(text) for text in TRICKY] + PROXY_FORM_ONLY
    (trick / "compact.jsonl").write_text(
        header("compact", domain="trick").decode() + "\n" + "\n".join(compact) + "\n"
    )
    (trick / "crlf.jsonl").write_bytes(
        "\r\n".join([header("crlf").decode(), TRICKY[1], TRICKY[2]]).encode() + b"\r\n"
    )
    (trick / "v3.jsonl").write_text(
        '{"stretto_mcp_log":3,"session":"v3","started_unix_ms":1}\n' + TRICKY[1] + "\n"
    )
    (trick / "no-id.jsonl").write_text(
        '{"stretto_mcp_log":2,"session":"","started_unix_ms":1}\n' + TRICKY[1] + "\n"
    )
    (trick / "bad-domain.jsonl").write_text(
        '{"stretto_mcp_log":2,"session":"d","started_unix_ms":1,"domain":"../x"}\n\n'
        + TRICKY[1]
        + "\n"
    )


def table_digests(home: Path) -> dict:
    layout = Layout.at(home)
    _, stats = ingest_plan(layout, discover(layout, store.known_state(layout)), "rows")
    out: dict = {
        "lines": [
            stats.lines_read,
            stats.lines_ingested,
            stats.lines_quarantined,
            stats.lines_dropped,
        ]
    }
    for table in TABLES:
        rows = store.query(layout, f"SELECT * FROM {table}")
        schema = [(f.name, str(f.type)) for f in rows.schema]
        texts = []
        for row in rows.to_pylist():
            if table == "quarantine" and row["session"] is None:
                row["day"] = "the day it ran"  # a file without a start time: today
            texts.append(json.dumps(row, sort_keys=True, default=str))
        digest = hashlib.sha256("\n".join(sorted(texts)).encode()).hexdigest()
        out[table] = {"rows": len(texts), "sha256": digest, "schema": schema}
    return out


def test_ingest_gives_the_rows_it_gave_before(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_corpus(home / "logs")
    got = table_digests(home)
    if os.environ.get("STRETTO_WRITE_INGEST_ROWS"):
        RECORDED.write_text(json.dumps(got, indent=1) + "\n")
    want = json.loads(RECORDED.read_text())
    assert got["lines"] == want["lines"]
    for table in TABLES:
        assert [list(c) for c in got[table]["schema"]] == want[table]["schema"], table
        assert (got[table]["rows"], got[table]["sha256"]) == (
            want[table]["rows"],
            want[table]["sha256"],
        ), table
