"""`stretto doctor`: is this installation ready? One row per check; any problem exits 1."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ["dagster", "dagster-webserver", "duckdb", "polars", "pyarrow", "numpy", "jsonschema"]
PROJECT = Path(__file__).resolve().parents[2]
FILESYSTEM_SERVER = PROJECT / "node" / "node_modules" / ".bin" / "mcp-server-filesystem"


def checks(home: Path) -> list[tuple[str, bool, str]]:
    """(what, ok, detail) for each check."""
    rows = []
    version = sys.version_info
    rows.append(
        (
            "Python 3.11",
            version[:2] == (3, 11),
            f"{version.major}.{version.minor}.{version.micro} at {sys.executable}",
        )
    )
    for package in PACKAGES:
        try:
            rows.append((f"package {package}", True, importlib.metadata.version(package)))
        except importlib.metadata.PackageNotFoundError:
            rows.append((f"package {package}", False, "not installed: run `make setup`"))
    node = shutil.which("node")
    if node:
        done = subprocess.run([node, "--version"], capture_output=True, text=True)
        rows.append(("node", done.returncode == 0, f"{done.stdout.strip()} at {node}"))
    else:
        rows.append(("node", False, "not on PATH (the walkthrough's filesystem server needs it)"))
    rows.append(
        (
            "filesystem MCP server",
            FILESYSTEM_SERVER.exists(),
            str(FILESYSTEM_SERVER)
            if FILESYSTEM_SERVER.exists()
            else f"{FILESYSTEM_SERVER} is missing: run `make setup`",
        )
    )
    rows.append(_writable("STRETTO_HOME", home))
    rows.extend(_dagster())
    return rows


def _writable(label: str, folder: Path) -> tuple[str, bool, str]:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
        return (f"{label} writable", True, str(folder))
    except OSError as exc:
        return (f"{label} writable", False, f"{folder}: {exc.strerror or exc}")


def _dagster() -> list[tuple[str, bool, str]]:
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return [
            (
                "DAGSTER_HOME",
                False,
                "not set: set it to an absolute folder holding "
                "dagster.yaml (needed for the Dagster UI)",
            )
        ]
    if not os.path.isabs(home):
        return [("DAGSTER_HOME", False, f"{home!r} is not an absolute path")]
    rows = [("DAGSTER_HOME", True, home)]
    config = Path(home) / "dagster.yaml"
    if not config.exists():
        rows.append(
            ("dagster.yaml", False, f"{config} is missing: copy the project's dagster.yaml there")
        )
        return rows
    import yaml  # dagster's own dependency

    try:
        settings = yaml.safe_load(config.read_text()) or {}
    except yaml.YAMLError as exc:
        return [*rows, ("dagster.yaml", False, f"{config}: not YAML ({exc})")]
    telemetry = (settings.get("telemetry") or {}).get("enabled", True)
    rows.append(
        ("dagster telemetry off", telemetry is False, f"{config}: telemetry.enabled is {telemetry}")
    )
    return rows


def render(rows: list[tuple[str, bool, str]]) -> str:
    width = max(len(what) for what, _, _ in rows)
    lines = [f"{'check'.ljust(width)}  ok    detail", f"{'-' * width}  ----  ------"]
    lines += [
        f"{what.ljust(width)}  {'yes ' if ok else 'NO  '}  {detail}" for what, ok, detail in rows
    ]
    return "\n".join(lines) + "\n"
