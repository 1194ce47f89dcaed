"""The warehouse: session logs ingested into Parquet tables and the counts a flow is learned
from, computed in DuckDB. The layout, the catalogue and where the data lives are here; the
wings are `ingest` (logs in), `counts` (a flow's counts) and `upkeep` (compaction, retention,
forgetting). It imports no dagster; the assets call it."""
