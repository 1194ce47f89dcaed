"""Log files with every kind of bad input, and what an ingest must make of each (shared by the
ingest tests: tests/warehouse/ingest/test_bad_input.py,
tests/warehouse/ingest/test_ingest_rows.py)."""

from __future__ import annotations

import json

HEADER = {
    "stretto_mcp_log": 2,
    "session": "s",
    "started_unix_ms": 1_796_083_860_031,
    "server_command": [],
    "domain": None,
    "agent_model": None,
}
PING = b'{"t_ms":1,"from":"client","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}'


def header(session: str, **fields: object) -> bytes:
    return json.dumps({**HEADER, "session": session, **fields}).encode()


FAULTS = {
    # file: (content, lines read, ingested, quarantined, dropped)
    "bad-utf8": (
        header("bad-utf8")
        + b"\n"
        + PING
        + b'\n{"t_ms":2,"from":"client","raw":"\xff\xfe"}\n'
        + PING
        + b"\n",
        4,
        3,
        1,
        0,
    ),
    "bom": (b"\xef\xbb\xbf" + header("bom") + b"\n" + PING + b"\n", 2, 2, 0, 0),
    "long-torn": (header("long-torn") + b"\n" + b"a" * 200_000, 2, 1, 0, 1),
    "long-raw": (
        header("long-raw") + b'\n{"t_ms":1,"from":"client","raw":"' + b"a" * 200_000 + b'"}\n',
        2,
        2,
        0,
        0,
    ),
    "random-text": (b'\\\\u{["bb\t:,1\n]}{x\n\n"\\ud8\n', 4, 0, 3, 1),
    "only-newlines": (b"\n\n\n", 3, 0, 0, 3),
    "tab-line": (header("tab-line") + b"\n\t\n \t\r\n" + PING + b"\n", 4, 2, 0, 2),
    "lone-surrogate": (
        header("lone-surrogate")
        + b'\n{"t_ms":1,"from":"server","message":{"jsonrpc":"2.0","id":1,'
        + b'"result":{"content":[{"type":"text","text":"a\\ud800b"}]}}}\n'
        + b'{"t_ms":2,"from":"client","raw":"\\udc00"}\n',
        3,
        3,
        0,
        0,
    ),
    "torn-utf8": (header("torn-utf8") + b"\n" + PING + b'\n{"t_ms":3,"raw":"caf\xc3', 3, 2, 0, 1),
}
