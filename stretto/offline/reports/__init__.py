"""Reports over recorded sessions with a flow: audit, replay from the record, the threshold search,
the read-only ceiling, score reliability, and their tables and plots."""
