"""The walkthrough, run once per test session as `make run` runs it: what the walkthrough test
checks, and what the docs' commands then run on."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FILESYSTEM_SERVER, PYTHON, ROOT


@dataclass(frozen=True)
class Walked:
    user_home: Path  # HOME while it ran
    home: Path  # the stretto home it used: HOME/.stretto, the default
    out: str  # what it printed


def newcomer_env(user_home: Path) -> dict[str, str]:
    """A newcomer's environment: HOME is `user_home`, and nothing of stretto's or Dagster's is
    set (so the home is the default, `~/.stretto`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("STRETTO_HOME", "DAGSTER_HOME")}
    env["HOME"] = str(user_home)
    return env


@pytest.fixture(scope="session")
def walked(tmp_path_factory: pytest.TempPathFactory) -> Walked:
    assert FILESYSTEM_SERVER.exists(), "run `make setup`"
    user_home = tmp_path_factory.mktemp("newcomer")
    done = subprocess.run(
        [PYTHON, str(ROOT / "scripts/walkthrough.py")],
        capture_output=True,
        text=True,
        env=newcomer_env(user_home),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return Walked(user_home, user_home / ".stretto", done.stdout)
