"""`stretto-proxy --retain-days DAYS`: at start, the old logs and oracle-cache entries go, the
rest stays, and the proxy says what it deleted (the real proxy, a real server)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.conftest import echo_server, proxy

DAY_S = 86_400


def aged(path: Path, days: float, text: str = "{}\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    then = time.time() - days * DAY_S
    os.utime(path, (then, then))
    return path


def test_old_logs_and_cache_entries_are_deleted_at_start_and_said(tmp_path: Path) -> None:
    record, cache = tmp_path / "logs", tmp_path / "cache"
    old_log = aged(record / "20200101T000000.000Z-1.jsonl", 40)
    old_flow_log = aged(record / "20200101T000000.000Z-1.flow.jsonl", 40)
    recent_log = aged(record / "20260101T000000.000Z-2.jsonl", 5)
    not_ours = aged(record / "notes.txt", 400)
    old_answer = aged(cache / "ab" / ("ab" + "0" * 62 + ".json"), 31)
    recent_answer = aged(cache / "cd" / ("cd" + "1" * 62 + ".json"), 29)
    odd_name = aged(cache / "ab" / "readme.json", 400)

    done = subprocess.run(
        proxy(
            "--record",
            str(record),
            "--oracle-cache",
            str(cache),
            "--retain-days",
            "30",
            server=echo_server(),
        ),
        input=b"",
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    assert not old_log.exists() and not old_flow_log.exists() and not old_answer.exists()
    for kept in (recent_log, not_ours, recent_answer, odd_name):
        assert kept.exists(), kept
    said = done.stderr.decode()
    assert (
        f"--retain-days 30: deleted 1 session log(s) and 1 flow/confirm log(s) from {record}, "
        f"1 oracle-cache entry from {cache}"
    ) in said
    # this session's own log is new, and kept
    assert len([p for p in record.glob("*.jsonl") if p != recent_log]) == 1


def test_retain_days_wants_a_positive_count(tmp_path: Path) -> None:
    done = subprocess.run(
        proxy("--record", str(tmp_path), "--retain-days", "0", server=echo_server()),
        input=b"",
        capture_output=True,
    )
    assert done.returncode == 2 and b"--retain-days wants" in done.stderr
