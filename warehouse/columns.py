"""What each column of each warehouse table means: the one place the Dagster assets' column
schemas take their descriptions from (docs/formats.md §2 says the same, at more length; a test
checks every column named here is named there)."""

from __future__ import annotations

from warehouse.layout import PARTITION_KEYS, TABLES

SESSION = "the session id (the log header's `session`)"
INGEST_ID = "the ingest run that wrote the row"
DOCS: dict[str, dict[str, str]] = {
    "sessions": {
        "session": SESSION,
        "agent_model": "the header's agent_model, else the host's clientInfo.name, else unknown",
        "header_agent_model": "the header's agent_model as written (null if none)",
        "client_name": "clientInfo.name of the host's initialize",
        "server_command": "the header's server command (redacted by the proxy)",
        "log_version": "the header's stretto_mcp_log",
        "started_unix_ms": "when the proxy started (ms since the epoch)",
        "started_at": "when the proxy started",
        "file": "where the log is now, relative to the home",
        "content_hash": "BLAKE2b-128 of the file's bytes",
        "size_bytes": "the file's size",
        "lines_read": "lines in the file",
        "lines_ingested": "the header and every wire line that passed the checks",
        "lines_quarantined": "lines in quarantine",
        "lines_dropped": "blank lines, and a torn last line",
        "torn_last_line": "the last line was cut off (a crash mid-write)",
        "tools_snapshot": "MD5 of each tools/list answer's tool list, in log order",
        "header_extra": "header fields other than the standard six",
        "host_session": "the header's host_session: the host session the proxy ran in "
        "(STRETTO_SESSION, the MCP session with --listen, else host-<parent pid>)",
        "server_name": "the header's server_name (stretto-proxy --server-name; null if none)",
        "reward": "the header's reward; null for recorded sessions",
        "ingest_id": INGEST_ID,
    },
    "messages": {
        "session": SESSION,
        "seq": "the line number in the log (the header is line 1)",
        "t_ms": "ms since the proxy started",
        "sender": "the line's from: client, server, proxy, context",
        "kind": "request, notification, response, batch, context, raw, other",
        "method": "the JSON-RPC method",
        "rpc_id": "the JSON-RPC id as text",
        "is_error": "a response with error, or with result.isError",
        "size_bytes": "bytes of body",
        "body": "the message's JSON text, or the raw text",
        "ingest_id": INGEST_ID,
    },
    "calls": {
        "session": SESSION,
        "call_id": "the JSON-RPC id as text",
        "tool": "params.name",
        "arguments": "params.arguments ({} when absent)",
        "by_proxy": "a lookup the flow made, not the agent's own call",
        "turn": "the inferred LLM turn, from 0",
        "sent_after_results": "how many results of its turn had come back when it was sent",
        "sent_seq": "the request's line",
        "sent_sub": "its index in a batch (0 otherwise)",
        "sent_ms": "the request's t_ms",
        "answered_seq": "the first answer's line (null if none)",
        "answered_ms": "the first answer's t_ms",
        "answered_by": "server or proxy",
        "status": "ok, failed or unanswered",
        "cancelled": "the host cancelled it while it waited",
        "result_text": "the first answer's content",
        "ingest_id": INGEST_ID,
    },
    "context": {
        "session": SESSION,
        "seq": "the line number in the log",
        "t_ms": "ms since the proxy started",
        "role": "user, assistant, ... (null when not a string)",
        "content": "the text (a non-string content as JSON)",
        "ingest_id": INGEST_ID,
    },
    "tools": {
        "session": SESSION,
        "tool": "the tool's name",
        "kind": "read, write or generic (from readOnlyHint)",
        "contract": "the tool's contract (formats §1.4)",
        "summary": "the description's first sentence",
        "arg_docs": "argument -> description",
        "input_schema": "the tool's inputSchema",
        "snapshot": "MD5 of the tools/list answer it came from",
        "ingest_id": INGEST_ID,
    },
    "steps": {
        "session": SESSION,
        "step": "0, 1, ... in log order",
        "seq": "the log line",
        "action": "the tool's name, or respond",
        "kind": "tool or reply",
        "outcome": "ok or failed (tools); reply or end (replies)",
        "call_id": "the call's JSON-RPC id",
        "by_proxy": "a lookup the flow made",
        "ingest_id": INGEST_ID,
    },
    "quarantine": {
        "file": "the log's path, relative to the home",
        "line": "the line number (null for a file with no line)",
        "error": "why, naming the field",
        "raw": "the line as it was",
        "session": "the session id, when the header had one",
        "content_hash": "the file's content hash",
        "ingest_id": INGEST_ID,
    },
}
PARTITION_DOCS = {
    "domain": "the header's domain (mcp when none): a Hive partition key",
    "day": "the UTC date the session started: a Hive partition key",
}


def columns(table: str) -> list[tuple[str, str, str]]:
    """(name, DuckDB type, description) of each of the table's columns, partition keys last."""
    docs = {**DOCS[table], **PARTITION_DOCS}
    return [(name, kind, docs[name]) for name, kind in [*TABLES[table], *PARTITION_KEYS]]
