"""A flow's counts over the warehouse: the DuckDB group-bys, per-part counts kept for a cheap
relearn, the fit of alpha, the bindings' agreement, merged host sessions and session weights."""
