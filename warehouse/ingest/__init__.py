"""Session logs in, Parquet out: one run start to end and its report, which logs it reads,
the batches on worker processes, the steps run after it, and the redacted copy."""
