"""The walkthrough, as `make run` runs it, on the real filesystem server."""

from __future__ import annotations

import subprocess
from pathlib import Path

from stretto.episode import read_episodes
from tests.conftest import FILESYSTEM_SERVER, PYTHON, ROOT


def test_the_walkthrough_records_eight_checked_sessions(tmp_path: Path) -> None:
    assert FILESYSTEM_SERVER.exists(), "run `make setup`"
    done = subprocess.run(
        [PYTHON, str(ROOT / "scripts/walkthrough.py"), "--home", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout
    assert f"recorded 8 sessions in {tmp_path}/logs/notes" in done.stdout
    episodes = read_episodes(tmp_path / "logs/notes")
    assert len(episodes) == 8
    september = next(e for e in episodes if "September" in e.events[0].text)
    assert [c.name for c in september.calls()] == ["search_files"] + ["read_text_file"] * 3
    assert all(e.agent_model == "scripted-notes-agent" and e.domain == "notes" for e in episodes)
    assert september.tools["read_text_file"].kind == "read"

    # the walkthrough ingested what our proxy recorded; it agrees with the reader
    from tests.warehouse.helpers import mismatches, rows

    assert "the warehouse holds the 8 sessions and their 19 calls" in done.stdout
    assert mismatches(tmp_path) == []
    reads = rows(tmp_path, "SELECT count(*) AS n FROM steps WHERE action = 'read_text_file'")
    assert reads == [{"n": sum(len(e.calls()) - 1 for e in episodes)}]
