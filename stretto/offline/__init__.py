"""Work over recorded sessions with a flow: audit, replay, search, promote, evaluate and review."""
