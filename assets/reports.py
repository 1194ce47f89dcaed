"""What the report assets share: a domain's served flow and the folders of sessions they read
by default, skipping with a reason when a home has none yet, and when they are made again."""

from pathlib import Path

import dagster as dg

from warehouse.layout import Layout

# Each report of a domain is made again after its flow is (re)learned, whatever run learned it
# (the nightly's relearn, the new_logs sensor's, a click): the `reports_after_relearn` sensor
# (pipeline/definitions.py) evaluates this and launches the runs. A staged flow (not served,
# not materialized) triggers nothing; a report already in flight is not asked again.
AFTER_EACH_FLOW = dg.AutomationCondition.eager()


def served_flow(layout: Layout, domain: str, given: str | None) -> Path:
    return Path(given) if given else layout.flow(domain)


def missing(needs: dict[str, Path]) -> str | None:
    """Why the asset is skipped, when a file or folder it needs is not there."""
    for what, path in needs.items():
        if not path.exists():
            return f"no {what} at {path} yet"
    return None
