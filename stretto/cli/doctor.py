"""`stretto doctor`: is this installation ready? One row per check. A problem (something stretto
itself needs) exits 1; a warning (what only the walkthrough or the Dagster UI needs, or a
convenience) does not. It only looks: nothing is created, not even the home."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from stretto.console.doctor import checks as console_checks
from stretto.home import Paths
from stretto.model.flow import FlowError, load_flow
from stretto.oracle.errors import OracleError
from stretto.oracle.http import HttpOptions
from stretto.oracle.oracle import Oracle
from stretto.oracle.questions import probe_request
from stretto.oracle.runners import RunnerOptions, open_runner
from stretto.oracle.runners.base import Context
from warehouse import store
from warehouse.datastore import StorageError
from warehouse.layout import TABLES, Layout

PACKAGES = ["dagster", "dagster-webserver", "duckdb", "polars", "pyarrow", "numpy", "jsonschema"]
PROJECT = Path(__file__).resolve().parents[2]
FILESYSTEM_SERVER = PROJECT / "node" / "node_modules" / ".bin" / "mcp-server-filesystem"

# A row: (what, ok, detail); ok is True, False (a problem) or WARN.
WARN = None
Row = tuple[str, bool | None, str]


def checks(home: Path, oracles: list[str] | None = None, network: bool = False) -> list[Row]:
    """Each check's row, in the order they are printed. `oracles`: System-One runners to check
    besides those the flows' arbiters name; `network`: ask each one question."""
    rows: list[Row] = [_python()]
    rows += [_package(name) for name in PACKAGES]
    rows.append(_proxy_on_path())
    rows += _node()
    rows.append(_home(home))
    rows.append(_warehouse(home))
    rows += _flows(home)
    rows += _runners(home, oracles or [], network)
    rows += _dagster()
    rows += _console()
    return rows


def _python() -> Row:
    v = sys.version_info
    return ("Python 3.11", v[:2] == (3, 11), f"{v.major}.{v.minor}.{v.micro} at {sys.executable}")


def _package(name: str) -> Row:
    try:
        return (f"package {name}", True, importlib.metadata.version(name))
    except importlib.metadata.PackageNotFoundError:
        return (f"package {name}", False, "not installed: run `make setup`")


def _proxy_on_path() -> Row:
    beside = Path(sys.executable).parent / "stretto-proxy"
    found = shutil.which("stretto-proxy")
    if found:
        return ("stretto-proxy on PATH", True, found)
    how = (
        f"not on PATH: run `source {beside.parent}/activate` (stretto init names it in full, "
        f"{beside}, so hosts need no PATH)"
    )
    return ("stretto-proxy on PATH", WARN, how)


def _node() -> list[Row]:
    node = shutil.which("node")
    if not node:
        return [("node", WARN, "not on PATH: the walkthrough's filesystem server needs it")]
    done = subprocess.run([node, "--version"], capture_output=True, text=True)
    rows: list[Row] = [("node", done.returncode == 0 or WARN, f"{done.stdout.strip()} at {node}")]
    if FILESYSTEM_SERVER.exists():
        rows.append(("filesystem MCP server", True, str(FILESYSTEM_SERVER)))
    else:
        rows.append(
            ("filesystem MCP server", WARN, f"{FILESYSTEM_SERVER} is missing: run `make setup`")
        )
    return rows


def _home(home: Path) -> Row:
    """Writable if it exists; else creatable (the first command that writes creates it)."""
    if home.exists():
        if not home.is_dir():
            return ("STRETTO_HOME", False, f"{home}: not a folder")
        if not os.access(home, os.W_OK | os.X_OK):
            return ("STRETTO_HOME", False, f"{home}: not writable")
        return ("STRETTO_HOME", True, f"{home}, writable")
    parent = next(p for p in home.parents if p.exists())
    if not os.access(parent, os.W_OK | os.X_OK):
        return ("STRETTO_HOME", False, f"{home} cannot be created: {parent} is not writable")
    return ("STRETTO_HOME", True, f"{home}, not there yet: the first command that writes makes it")


def _warehouse(home: Path) -> Row:
    """Readable, with every view a query may name."""
    layout = Layout.at(home)
    where = layout.url or layout.database  # an object store's: $STRETTO_WAREHOUSE
    try:
        there = store.has_warehouse(layout) if layout.url else layout.database.exists()
    except StorageError as exc:
        return ("warehouse", False, str(exc))
    if not there:
        where_made = layout.url or layout.warehouse
        return ("warehouse", WARN, f"none yet under {where_made}: `stretto ingest` makes it")
    try:
        names = store.query(layout, "SELECT table_name FROM information_schema.tables")
        present = set(names.column("table_name").to_pylist())
        missing = [view for view in TABLES if view not in present]
        if missing:
            return (
                "warehouse",
                False,
                f"{where}: no view {', '.join(missing)}: run `stretto ingest`",
            )
        counted = " UNION ALL ".join(
            f"SELECT '{view}' AS view, count(*) AS n FROM {view}" for view in TABLES
        )
        counts = {r["view"]: r["n"] for r in store.query(layout, counted).to_pylist()}
    except Exception as exc:  # DuckDB's and pyarrow's errors: the row says what it was
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ("warehouse", False, f"{layout.url or layout.warehouse}: cannot be read ({first})")
    return (
        "warehouse",
        True,
        f"{where}: {counts['sessions']} sessions, {counts['calls']} calls, "
        f"{counts['quarantine']} quarantined lines",
    )


def _flows(home: Path) -> list[Row]:
    """Each flow under HOME/flows/ validates, as the proxy would load it."""
    folder = Paths(home).flows
    files = sorted(folder.glob("*.flow.json")) if folder.is_dir() else []
    if not files:
        return [("flows", True, f"none yet in {folder}")]
    bad: list[Row] = []
    for path in files:
        try:
            load_flow(path)
        except (FlowError, OSError) as exc:
            bad.append((f"flow {path.name}", False, str(exc)))
    good = len(files) - len(bad)
    return [("flows", not bad, f"{good} of {len(files)} valid in {folder}"), *bad]


CHECK_TIMEOUT_S = 5.0


def _runners(home: Path, given: list[str], network: bool) -> list[Row]:
    """Each System-One runner configured — named by a flow's arbiter under HOME/flows/, or
    given with --oracle — is reachable, has the model, has its key (never printed); with
    `network`, answers one question (not cached: doctor changes nothing)."""
    folder = Paths(home).flows
    named: dict[str, str] = {uri: "--oracle" for uri in given}
    for path in sorted(folder.glob("*.flow.json")) if folder.is_dir() else []:
        try:
            model = json.loads(path.read_text()).get("arbiter", {}).get("model")
        except (OSError, ValueError, AttributeError):
            continue  # the flows' row says what is wrong with it
        if isinstance(model, str) and model:
            named.setdefault(model, path.name)
    if not named:
        return [
            (
                "System-One runners",
                True,
                "none configured (no flow has an arbiter; check one with --oracle URI)",
            )
        ]
    rows: list[Row] = []
    options = RunnerOptions(http=HttpOptions(timeout=CHECK_TIMEOUT_S, retries=0, max_wait=0.0))
    for uri, where in named.items():
        what = f"oracle {uri} ({where})"
        try:
            runner = open_runner(uri, options)
            detail = runner.check()
            if network:
                probe = probe_request()
                even = dict.fromkeys(probe.question("next").names, 0.5)  # simulate://habit's
                asked = Oracle(runner).ask(probe, Context("doctor/probe/0", even))
                choice = f"{asked.record['choice']} at {asked.record['confidence']:.2f}"
                detail += f"; answered a question ({choice}, {asked.record['ms']:.0f} ms)"
        except OracleError as exc:
            rows.append((what, False, str(exc)))
            continue
        rows.append((what, True, detail))
    return rows


def _dagster() -> list[Row]:
    """DAGSTER_HOME, which only the Dagster UI needs: warnings, never problems."""
    how = (
        "make setup writes .env so that `dagster dev -m pipeline` from the repository's root "
        "uses HOME/dagster; elsewhere export DAGSTER_HOME=~/.stretto/dagster, make it and "
        "copy pipeline/dagster.yaml there (docs/cli.md, the Dagster UI)"
    )
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return [("DAGSTER_HOME", WARN, f"not set; only the Dagster UI needs it: {how}")]
    if not os.path.isabs(home):
        return [("DAGSTER_HOME", WARN, f"{home!r} is not an absolute path: {how}")]
    rows: list[Row] = [("DAGSTER_HOME", True, home)]
    config = Path(home) / "dagster.yaml"
    if not config.exists():
        return [*rows, ("dagster.yaml", WARN, f"{config} is missing: {how}")]
    import yaml  # only with a dagster.yaml to read: yaml is dagster's dependency, not ours

    try:
        settings = yaml.safe_load(config.read_text()) or {}
    except (yaml.YAMLError, OSError) as exc:
        return [*rows, ("dagster.yaml", WARN, f"{config}: cannot be read ({exc})")]
    telemetry = (settings.get("telemetry") or {}).get("enabled", True)
    off = telemetry is False
    detail = f"{config}: telemetry.enabled is {str(telemetry).lower()}"
    return [*rows, ("dagster telemetry off", True if off else WARN, detail)]


def _console() -> list[Row]:
    """Whether stretto-console can start: its own checks (they look for its packages, pages
    and front-end libraries without importing them); warnings, as only the console needs them."""
    return [(what, ok or WARN, detail) for what, ok, detail in console_checks()]


def render(rows: list[Row]) -> str:
    """The table: check, ok (yes, warn or NO), detail."""
    width = max(len(what) for what, _, _ in rows)
    marks = {True: "yes ", False: "NO  ", WARN: "warn"}
    lines = [f"{'check'.ljust(width)}  ok    detail", f"{'-' * width}  ----  ------"]
    lines += [f"{what.ljust(width)}  {marks[ok]}  {detail}" for what, ok, detail in rows]
    return "\n".join(lines) + "\n"
