"""The benchmarks that need τ²-bench's full data find it by option, environment or beside the
repository, and say in one line what they need when none holds it (bench/tau2data.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import tau2data
from tests.conftest import ROOT, TAU2

BENCHMARKS = ["replay", "quality", "search", "features", "missed", "live"]


def a_data_folder(folder: Path) -> Path:
    (folder / "domains").mkdir(parents=True)
    (folder / "MANIFEST.json").write_text('{"files": []}')
    (folder / "domains/tau2_tools.json").write_bytes(
        (TAU2 / "domains/tau2_tools.json").read_bytes()
    )
    return folder


def test_the_option_wins_over_the_environment(tmp_path, monkeypatch) -> None:
    given, env = a_data_folder(tmp_path / "given"), a_data_folder(tmp_path / "env")
    monkeypatch.setenv(tau2data.ENV, str(env))
    assert tau2data.choose(str(given)) == given
    assert tau2data.choose(None) == env
    assert tau2data.tau2() == env


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_folder_without_the_data_is_refused_in_one_line(how, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(tau2data.ENV, str(tmp_path) if how == "environment" else "")
    with pytest.raises(SystemExit) as stopped:
        tau2data.choose(str(tmp_path) if how == "option" else None)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert f"no τ²-bench data at {tmp_path}" in err
    assert "--tau2 DIR" in err and "STRETTO_TAU2" in err and "tau2-bench" in err


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_says_what_it_needs_and_exits_2(name: str, tmp_path: Path) -> None:
    """The script itself (its own process: the exit status is the point)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{name}.py"), "--tau2", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"{name}.py: no τ²-bench data at {tmp_path} (--tau2;")
