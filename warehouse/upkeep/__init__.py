"""Keeping the warehouse: compaction, retention, and sessions taken out for good."""
