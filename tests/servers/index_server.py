"""A second small MCP server for tests (the `mcp` SDK, stdio): a documentation index, to run
beside demo_server.py as another server of the same host session.

Tools (both read-only): `search` returns the pages whose title holds the query, as JSON
`{"hits": [{"id", "title"}]}` (the query itself is always a hit, `doc-<query>`); `fetch`
returns a page by id.
"""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

READ = ToolAnnotations(readOnlyHint=True)

server = MCPServer("stretto-test-docs", log_level="WARNING")


@server.tool(description="Search the documentation.", annotations=READ)
def search(query: str) -> str:
    return json.dumps({"hits": [{"id": f"doc-{query}", "title": f"All about {query}"}]})


@server.tool(description="Fetch a documentation page by id.", annotations=READ)
def fetch(id: str) -> str:  # noqa: A002 - the tool's argument name
    return json.dumps({"id": id, "text": f"The page {id}."})


if __name__ == "__main__":
    server.run()
