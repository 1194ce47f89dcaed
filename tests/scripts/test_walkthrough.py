"""The walkthrough, as `make run` runs it: the whole loop on the real filesystem server."""

from __future__ import annotations

import subprocess
from pathlib import Path

from stretto.logs.episode import read_episodes
from tests.conftest import FILESYSTEM_SERVER, PYTHON, ROOT
from tests.warehouse.helpers import mismatches, rows


def test_the_walkthrough_runs_the_whole_loop(tmp_path: Path) -> None:
    assert FILESYSTEM_SERVER.exists(), "run `make setup`"
    done = subprocess.run(
        [PYTHON, str(ROOT / "scripts/walkthrough.py"), "--home", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "FAILED" not in out
    for step in (
        "1. Recording 8 sessions",
        "2. Learning a flow",
        "3. Reviewing it",
        "4. Auditing it on 3 sessions it never saw",
        "5. Serving it",
        "6. Replaying the 3 held-out sessions",
        "7. Serving it in shadow mode",
        "8. Learning again from all eleven sessions",
        "9. Ingesting",
    ):
        assert step in out
    assert "ok  the agent made 1 call where it makes 4: the flow read the 3 notes for it" in out
    assert "ok  the flow would have saved every turn a read-only speculator could" in out
    assert "ok  shadow mode earned search_files its promotion" in out
    assert "ok  flow-diff exits 0" in out
    assert "ok  the warehouse holds the 11 sessions and their 29 calls" in out

    # what our proxy recorded agrees with the reader, in the warehouse
    episodes = read_episodes(tmp_path / "logs/notes")
    assert len(episodes) == 11
    september = next(e for e in episodes if e.events[0].text == "Summarize the September meetings.")
    assert [c.name for c in september.calls()] == ["search_files"] + ["read_text_file"] * 3
    assert all(e.agent_model == "scripted-notes-agent" and e.domain == "notes" for e in episodes)
    assert mismatches(tmp_path) == []
    reads = rows(tmp_path, "SELECT count(*) AS n FROM steps WHERE action = 'read_text_file'")
    assert reads == [{"n": sum(len(e.calls()) - 1 for e in episodes)}]
    served = list((tmp_path / "walkthrough/served").glob("*.flow.jsonl"))
    assert len(served) == 1
