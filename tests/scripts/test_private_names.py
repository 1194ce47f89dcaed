"""scripts/private_names.py (run by `make lint`) finds another module's private name, imported
by name or read off an imported module, and fails; a module's own private names pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import PYTHON, ROOT

SCRIPT = ROOT / "scripts" / "private_names.py"


def run_on(root: Path, modules: dict[str, str]) -> subprocess.CompletedProcess[str]:
    package = root / "toy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in modules.items():
        (package / f"{name}.py").write_text(text)
    return subprocess.run(
        [PYTHON, str(SCRIPT), "toy"], capture_output=True, text=True, cwd=root, check=False
    )


def test_another_modules_private_name_fails_where_it_is_used(tmp_path: Path) -> None:
    done = run_on(
        tmp_path,
        {
            "learn": "def _levels(rows):\n    return rows\n",
            "weights": "from toy.learn import _levels\n",
            "drift": "from toy import learn\n\n\ndef score():\n    return learn._levels([])\n",
        },
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "toy/drift.py:5: toy.learn._levels",
        "toy/weights.py:1: toy.learn._levels",
    ]


def test_private_names_kept_in_their_module_pass(tmp_path: Path) -> None:
    done = run_on(
        tmp_path,
        {
            "learn": "def _levels(rows):\n    return rows\n\n\ndef levels(rows):\n"
            "    return _levels(rows)\n",
            "weights": "from toy.learn import levels\n\nLEVELS = levels([])\n",
        },
    )
    assert (done.returncode, done.stdout) == (0, "")
