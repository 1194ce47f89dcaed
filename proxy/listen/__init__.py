"""`--listen`: hosts that speak Streamable HTTP, one session each, and `--servers`: one session
fronting several servers."""
