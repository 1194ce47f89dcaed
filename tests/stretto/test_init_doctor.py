"""`stretto init` and `stretto doctor`, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

STRETTO = str(Path(sys.executable).parent / "stretto")
SERVER = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]


@pytest.mark.parametrize(
    ("host", "table", "typed"),
    [
        ("claude-desktop", "mcpServers", False),
        ("claude-code", "mcpServers", True),
        ("cursor", "mcpServers", False),
        ("vscode", "servers", True),
    ],
)
def test_init_prints_the_hosts_json(host: str, table: str, typed: bool) -> None:
    done = subprocess.run(
        [STRETTO, "init", "--host", host, "--", *SERVER], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    entry = config[table]["filesystem"]
    assert entry["command"].endswith("stretto-proxy") and Path(entry["command"]).exists()
    assert entry["args"][:4] == ["--record", "~/.stretto/logs/filesystem", "--domain", "filesystem"]
    assert entry["args"][entry["args"].index("--") + 1 :] == SERVER
    assert ("type" in entry) == typed
    assert "stretto learn --sessions ~/.stretto/logs/filesystem" in done.stderr


def test_init_with_a_flow_and_its_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.flow.json"
    bad.write_text("{}")
    done = subprocess.run(
        [STRETTO, "init", "--flow", str(bad), "--", *SERVER], capture_output=True, text=True
    )
    assert done.returncode == 1 and "field" in done.stderr
    missing = subprocess.run([STRETTO, "init"], capture_output=True, text=True)
    assert missing.returncode == 2 and "give the server's command after --" in missing.stderr


def test_doctor_checks_dagster_home(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    unset = subprocess.run(
        [STRETTO, "doctor", "--home", str(tmp_path / "home")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert unset.returncode == 1
    assert "DAGSTER_HOME               NO" in unset.stdout
    assert "stretto: 1 problem(s): DAGSTER_HOME" in unset.stderr
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    ready = subprocess.run(
        [STRETTO, "doctor", "--home", str(tmp_path / "home")],
        capture_output=True,
        text=True,
        env={**env, "DAGSTER_HOME": str(dagster_home)},
    )
    assert ready.returncode == 0, ready.stdout
    assert "dagster telemetry off      yes" in ready.stdout
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    noisy = subprocess.run(
        [STRETTO, "doctor", "--home", str(tmp_path / "home")],
        capture_output=True,
        text=True,
        env={**env, "DAGSTER_HOME": str(dagster_home)},
    )
    assert noisy.returncode == 1 and "dagster telemetry off      NO" in noisy.stdout
