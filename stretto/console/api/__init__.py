"""The console's JSON API: the endpoint table, a flow's life and a session's time and tools, and
the OpenAPI description made from the table."""
