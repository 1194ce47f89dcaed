"""`stretto init` and `stretto doctor`, as a user runs them (in this process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretto.cli import main
from tests.conftest import ROOT

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
def test_init_prints_the_hosts_json(host: str, table: str, typed: bool, capsys) -> None:
    assert main(["init", "--host", host, "--", *SERVER]) == 0
    out, err = capsys.readouterr()
    config = json.loads(out)
    entry = config[table]["filesystem"]
    assert entry["command"].endswith("stretto-proxy") and Path(entry["command"]).exists()
    assert entry["args"][:4] == ["--record", "~/.stretto/logs/filesystem", "--domain", "filesystem"]
    assert entry["args"][entry["args"].index("--") + 1 :] == SERVER
    assert ("type" in entry) == typed
    assert "stretto learn --sessions ~/.stretto/logs/filesystem" in err


def test_init_with_a_flow_and_its_errors(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.flow.json"
    bad.write_text("{}")
    assert main(["init", "--flow", str(bad), "--", *SERVER]) == 1
    assert "field" in capsys.readouterr().err
    assert main(["init"]) == 2
    assert "give the server's command after --" in capsys.readouterr().err


def test_init_serves_a_flow_with_its_decider(shop_flow_path: Path, capsys) -> None:
    argv = ["init", "--flow", str(shop_flow_path), "--decider", "habit", "--home", "/srv/s"]
    assert main([*argv, "--name", "shop", "--", "node", "server.js"]) == 0
    args = json.loads(capsys.readouterr().out)["mcpServers"]["shop"]["args"]
    assert args[:2] == ["--record", "/srv/s/logs/shop"]
    assert args[args.index("--flow") + 1] == str(shop_flow_path)
    assert args[args.index("--flow-decider") + 1] == "habit"
    assert args[args.index("--") + 1 :] == ["node", "server.js"]


def test_doctor_checks_dagster_home(tmp_path: Path, monkeypatch, capsys) -> None:
    home = str(tmp_path / "home")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main(["doctor", "--home", home]) == 1
    out, err = capsys.readouterr()
    assert "DAGSTER_HOME               NO" in out
    assert "stretto: 1 problem(s): DAGSTER_HOME" in err
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    assert main(["doctor", "--home", home]) == 0, capsys.readouterr().out
    assert "dagster telemetry off      yes" in capsys.readouterr().out
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    assert main(["doctor", "--home", home]) == 1
    assert "dagster telemetry off      NO" in capsys.readouterr().out
