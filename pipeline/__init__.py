"""Dagster Definitions for stretto: resources, jobs, the nightly schedule, the log sensor."""

from pipeline.definitions import defs

__all__ = ["defs"]
