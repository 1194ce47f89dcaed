"""stretto: learn the reads an MCP agent is about to make, and make them for it."""

__version__ = "0.1.0"
