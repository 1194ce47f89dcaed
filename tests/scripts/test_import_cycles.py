"""scripts/import_cycles.py (run by `make lint`) finds a cycle that an import inside a function
hides, says where each of its imports is written and fails; a package without one passes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import PYTHON, ROOT

SCRIPT = ROOT / "scripts" / "import_cycles.py"


def write_package(root: Path, modules: dict[str, str]) -> None:
    package = root / "toy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in modules.items():
        (package / f"{name}.py").write_text(text)


def run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, str(SCRIPT), "toy"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
    )


def test_a_cycle_closed_inside_a_function_fails_with_its_imports(tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {
            "episode": "def read():\n    from toy.merged import merge\n    return merge\n",
            "merged": "from toy.episode import read\n\nmerge = read\n",
            "apart": "from toy.episode import read\n",
        },
    )
    done = run(tmp_path)
    assert done.returncode == 1
    assert "import cycle among 2 modules: toy.episode, toy.merged" in done.stdout
    assert "toy.episode -> toy.merged    (line 2: from toy.merged import merge)" in done.stdout
    assert "toy.merged -> toy.episode    (line 1: from toy.episode import read)" in done.stdout
    assert "toy.apart" not in done.stdout


def test_a_package_whose_imports_run_one_way_passes(tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {"low": "X = 1\n", "mid": "from toy.low import X\n", "top": "from toy import low, mid\n"},
    )
    done = run(tmp_path)
    assert (done.returncode, done.stdout) == (0, "")
