"""stretto-proxy: an MCP server's stdio (or Streamable HTTP) wrapped so that every message is
forwarded unchanged and recorded, and, given a flow, the lookups it expects are made for the
agent. The command line, one session and the relay are here; the wings are `transport`
(moving the bytes), `record` (what is kept), `serve` (serving a flow) and `listen` (hosts
over HTTP, several servers as one). It imports no dagster, duckdb, polars or pyarrow."""
