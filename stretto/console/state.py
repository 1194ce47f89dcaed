"""The console's state: the data directory and what reads it, the jobs, the events, the
settings; and the error every endpoint answers with."""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path

from stretto.console import adapter, files
from stretto.console.doctor import vendor_files
from stretto.console.events import PING_S, Events
from stretto.console.jobs import KINDS, Jobs, default_stretto
from stretto.console.threshold import threshold_problem
from stretto.console.views.catalog import Catalog
from stretto.console.views.driftruns import DRIFT_MAX_CALLS, Drifts
from stretto.console.views.flowview import Replays
from stretto.console.views.overview import Overview

DEFAULT_SETTINGS = {
    "threshold": adapter.DEFAULT_THRESHOLD,
    "beta": adapter.DEFAULT_COSTS[0],
    "delta": adapter.DEFAULT_COSTS[1],
    "dagster_url": "",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class Options:
    data: Path
    listen: str = "127.0.0.1:7878"
    token: str | None = None  # None: no auth (--no-auth)
    read_only: bool = False
    stretto: list[str] | None = None
    ping_s: float = PING_S
    drift_max_calls: int = DRIFT_MAX_CALLS  # past it, a flow's drift is "too large"


class Console:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.data = options.data.resolve()
        self.catalog = Catalog(self.data)
        self.replays = Replays(self.catalog)
        self.drifts = Drifts(self.catalog, options.drift_max_calls)
        self.overview = Overview(self.catalog, self.replays)
        self.events = Events(self._signature, ping_s=options.ping_s)
        self.jobs = Jobs(
            self.data, options.stretto or default_stretto(), self.events.publish, self.catalog
        )
        self.settings_lock = threading.Lock()

    def _signature(self) -> tuple:
        return self.catalog.signature()

    def changed(self, what: str) -> None:
        self.catalog.scan(fresh=True)
        self.drifts.cancel_stale()
        self.events.publish("changed", {"what": what})

    def stop(self) -> None:
        """The server is shutting down: end the event streams (else it waits for them) and
        cancel the drift computations."""
        self.events.stop()
        self.drifts.stop()

    # settings ------------------------------------------------------------------------------

    @property
    def settings_path(self) -> Path:
        return self.data / "console" / "settings.json"

    def settings(self) -> dict:
        try:
            saved = json.loads(self.settings_path.read_text())
        except (OSError, ValueError):
            saved = {}
        out = dict(DEFAULT_SETTINGS)
        out.update({k: v for k, v in saved.items() if k in DEFAULT_SETTINGS})
        return out

    def save_settings(self, changes: dict) -> dict:
        unknown = sorted(set(changes) - set(DEFAULT_SETTINGS))
        if unknown:
            raise ApiError(
                422, f"field `{unknown[0]}`: not a setting ({', '.join(DEFAULT_SETTINGS)})"
            )
        if "threshold" in changes and (problem := threshold_problem(changes["threshold"])):
            raise ApiError(422, f"field `threshold`: {problem}")  # a probability × a chance
        for name in ("beta", "delta"):
            if name in changes:
                value = changes[name]
                number = isinstance(value, int | float) and not isinstance(value, bool)
                # NaN and infinity pass a bare `< 0` (Python's JSON reader accepts them)
                if not number or not math.isfinite(value) or value < 0:
                    raise ApiError(422, f"field `{name}`: expected a number ≥ 0, got {value!r}")
        if "beta" in changes and changes["beta"] <= 0:
            raise ApiError(422, "field `beta`: the value of a saved turn must be above 0")
        url = changes.get("dagster_url", "")
        if not isinstance(url, str) or (url and not url.startswith(("http://", "https://"))):
            raise ApiError(422, f"field `dagster_url`: expected an http(s) address, got {url!r}")
        with self.settings_lock:
            settings = self.settings() | changes
            files.write_json(self.settings_path, settings)
        self.events.publish("changed", {"what": "settings"})
        return settings

    # what the pages show about the console itself -------------------------------------------

    def meta(self) -> dict:
        logs, flows = self.catalog.scan()
        database = adapter.warehouse_database(self.data)
        return {
            "version": adapter.VERSION,
            "data": str(self.data),
            "listen": self.options.listen,
            "auth": "token" if self.options.token else "none (loopback only)",
            "read_only": self.options.read_only,
            "session_logs": len(logs),
            "flow_files": len(flows),
            "warehouse": str(database) if database.exists() else None,
            "libraries": {name: path.exists() for name, path in vendor_files().items()},
            "jobs": list(KINDS),
            "stretto": self.jobs.stretto,
        }

    def job_links(self, job: dict) -> dict:
        """The job, with where to see its assets in the Dagster UI when one is set up (the
        CLI materializes them on an ephemeral instance: no run of the UI's to link to)."""
        url = self.settings()["dagster_url"].rstrip("/")
        links = [f"{url}/assets/{asset}" for asset in job.get("assets", [])] if url else []
        return dict(job, dagster_links=links)
