"""Session logs in, Parquet out: which logs an ingest run reads, the batches on worker processes,
and the redacted copy."""
