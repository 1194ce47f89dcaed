"""The resource every asset uses: where STRETTO_HOME is, and how to behave in it."""

import os

import dagster as dg

from stretto.home import default_home
from warehouse.layout import Layout


class StrettoHome(dg.ConfigurableResource):
    """STRETTO_HOME (default: $STRETTO_HOME, else ~/.stretto) and run options."""

    home: str | None = None
    wait_seconds: float = 600.0  # how long an ingest waits for another run to finish
    progress: bool = False  # draw a progress bar on stderr (the CLI on a terminal)
    # the committed data's object-store URL; None: $STRETTO_WAREHOUSE, else HOME/warehouse
    warehouse: str | None = None
    # the newest sessions of each domain the ingest's drift check scores (assets/lifecycle.py)
    drift_sessions: int = 2000

    @classmethod
    def from_environment(cls) -> "StrettoHome":
        """The resource the Definitions hold: `home` from `EnvVar("STRETTO_HOME")` when it is
        set, else the default home spelled out, so the launchpad shows the home a run uses."""
        if os.environ.get("STRETTO_HOME"):
            return cls(home=dg.EnvVar("STRETTO_HOME"))
        return cls(home=str(default_home()))

    def layout(self) -> Layout:
        return Layout.at(self.home, self.warehouse)
