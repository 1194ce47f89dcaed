"""scripts/lazy_imports.py finds an import inside a function that does not say why it is there,
and fails; imports at the top, under `if TYPE_CHECKING:`, or with a reason pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import PYTHON, ROOT

SCRIPT = ROOT / "scripts" / "lazy_imports.py"


def run_on(root: Path, text: str, *options: str) -> subprocess.CompletedProcess[str]:
    package = root / "toy"
    package.mkdir(parents=True)
    (package / "mod.py").write_text(text)
    return subprocess.run(
        [PYTHON, str(SCRIPT), *options, "toy"],
        capture_output=True,
        text=True,
        cwd=root,
        check=False,
    )


UNEXPLAINED = """\
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path


def read():
    import json

    return json


class Reader:
    def read(self):
        if os.sep:
            from pathlib import PurePath  # noqa: F401
        return PurePath
"""


def test_an_import_inside_a_function_without_a_reason_fails(tmp_path: Path) -> None:
    done = run_on(tmp_path, UNEXPLAINED)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "toy/mod.py:9: import json",
        "toy/mod.py:17: from pathlib import PurePath  # noqa: F401",
    ]


EXPLAINED = """\
def main():
    import json  # entry point: only this command reads JSON

    return json


def plot():
    # heavy and rarely used: only the plot needs it
    import decimal
    import fractions

    return decimal, fractions


def query():
    # entry point: one comment covers the run, across isort's blank line between sections
    import decimal

    from pathlib import PurePath

    return decimal, PurePath


def draw():
    from fractions import (
        Fraction,  # ruff's format moves a reason on the line into the parentheses
    )

    return Fraction
"""


def test_imports_that_say_why_pass_and_all_counts_them(tmp_path: Path) -> None:
    done = run_on(tmp_path / "plain", EXPLAINED)
    assert (done.returncode, done.stdout) == (0, "")
    counted = run_on(tmp_path / "counted", EXPLAINED, "--all")
    assert counted.returncode == 0
    assert len(counted.stdout.splitlines()) == 6
