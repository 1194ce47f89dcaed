"""Where the benchmarks find τ²-bench's full data: `--tau2 DIR`, else $STRETTO_TAU2, else
../shared/data/tau2 beside the repository. The tests carry a few files of their own
(tests/data/tau2); the benchmarks need every results file, which only τ²-bench publishes."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = "STRETTO_TAU2"
BESIDE = ROOT.parent / "shared" / "data" / "tau2"
# what a folder must hold to be the data: the files' list and each domain's tools and splits
NEEDED = ("MANIFEST.json", "domains/tau2_tools.json")
WHERE = (
    "τ²-bench's results files (github.com/sierra-research/tau2-bench: data/tau2/results and "
    "data/tau2/domains, with a MANIFEST.json listing them)"
)

_chosen: Path | None = None


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tau2",
        metavar="DIR",
        help=f"τ²-bench's data folder (default: ${ENV}, else ../shared/data/tau2)",
    )


def choose(option: str | None) -> Path:
    """The data folder, from the option, the environment or beside the repository; when none
    holds it, say in one line what is needed and exit 2."""
    global _chosen
    given = option or os.environ.get(ENV)
    folder = Path(given) if given else BESIDE
    missing = [name for name in NEEDED if not (folder / name).is_file()]
    if missing:
        said = "--tau2" if option else f"${ENV}" if given else "the default"
        print(
            f"{Path(sys.argv[0]).name}: no τ²-bench data at {folder} ({said}; {missing[0]} is "
            f"missing): give --tau2 DIR or set {ENV} to a folder of {WHERE}",
            file=sys.stderr,
        )
        sys.exit(2)
    _chosen = folder
    return folder


def tau2() -> Path:
    """The folder chosen by `choose`, or chosen now from the environment."""
    return _chosen if _chosen is not None else choose(None)
