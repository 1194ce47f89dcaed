"""The `stretto` command as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REFERENCE_HOME

STRETTO = str(Path(sys.executable).parent / "stretto")


def test_sessions_lists_the_reference_served_logs() -> None:
    done = subprocess.run(
        [STRETTO, "sessions", str(REFERENCE_HOME / "served/shop")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert rows[0][0] == "session"
    assert rows[1] == ["20260928T020401.117Z-14662", "shop", "quickstart", "2", "3", "5", "2"]
    assert "2 session(s)" in done.stderr


def test_a_malformed_log_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text(
        '{"stretto_mcp_log":2,"session":"s","started_unix_ms":0}\n{"t_ms":1,"from":"x","raw":""}\n'
    )
    done = subprocess.run([STRETTO, "sessions", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1
    assert f"stretto: {tmp_path}/bad.jsonl:2: field `from`" in done.stderr


def test_no_command_prints_help_and_exits_2() -> None:
    done = subprocess.run([STRETTO], capture_output=True, text=True)
    assert done.returncode == 2 and "sessions" in done.stderr
