"""Whether the console can start here: rows for `stretto doctor`'s table (stretto.cli.doctor
adds them) and for the console's own meta."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
STATIC = PACKAGE / "static"
# stretto/console -> the checkout (as stretto/cli/doctor.py finds node/)
PROJECT = PACKAGE.parents[1]
NODE_MODULES = PROJECT / "node" / "node_modules"


def vendor_files() -> dict[str, Path]:
    """The front-end libraries the pages load, installed from npm by `make setup`."""
    return {
        "cytoscape": NODE_MODULES / "cytoscape" / "dist" / "cytoscape.min.js",
        "chart.js": NODE_MODULES / "chart.js" / "dist" / "chart.umd.min.js",
    }


def checks() -> list[tuple[str, bool, str]]:
    """(what, ok, detail) for each thing the console needs, as stretto doctor's rows."""
    rows = []
    for module in ("starlette", "uvicorn"):  # found, not imported: doctor stays fast
        found = importlib.util.find_spec(module) is not None
        detail = _version(module) if found else "not installed: run `make setup`"
        rows.append((f"console: package {module}", found, detail))
    pages = (STATIC / "index.html").exists()
    rows.append(("console: pages", pages, str(STATIC) if pages else f"{STATIC} is missing"))
    for name, path in vendor_files().items():
        rows.append(
            (
                f"console: {name}",
                path.exists(),
                str(path) if path.exists() else f"{path} is missing: run `make setup`",
            )
        )
    return rows


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "installed"


def can_start() -> tuple[bool, str]:
    """(ok, why not) — one line for `stretto doctor`."""
    problems = [f"{what}: {detail}" for what, ok, detail in checks() if not ok]
    return (not problems, "; ".join(problems) or "stretto-console can start")
