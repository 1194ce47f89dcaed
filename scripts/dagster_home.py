"""Give `dagster dev -m pipeline` (run from the repository's root) a DAGSTER_HOME under the
stretto home: make <STRETTO_HOME>/dagster with the project's dagster.yaml (telemetry off), and
write the root's `.env` (Dagster's CLI reads it) so DAGSTER_HOME defaults to that folder — a
DAGSTER_HOME set in the environment still wins. `make setup` runs it; the `.env` is not
committed (it names this machine's home)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "pipeline" / "dagster.yaml"
MARK = "# written by scripts/dagster_home.py"


def stretto_home() -> Path:
    chosen = os.environ.get("STRETTO_HOME")
    return Path(chosen).expanduser().resolve() if chosen else Path.home() / ".stretto"


def main() -> int:
    folder = stretto_home() / "dagster"
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "dagster.yaml").exists():  # a user's own settings are kept
        shutil.copy(CONFIG, folder / "dagster.yaml")
    env = ROOT / ".env"
    if env.exists() and MARK not in env.read_text():
        print(f"{env} exists and was not written by this script: left as it is", file=sys.stderr)
        return 0
    # ${DAGSTER_HOME:-...}: python-dotenv expands it, so an exported DAGSTER_HOME wins
    env.write_text(f"{MARK}\nDAGSTER_HOME=${{DAGSTER_HOME:-{folder}}}\n")
    print(f"dagster dev -m pipeline (from {ROOT}) keeps its runs in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
