"""Running one side of a benchmark in a process of its own, so that its peak memory is its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_side(script: str, args: list[str]) -> tuple[dict, float]:
    """Run `script` with `args` in a child process: the JSON it prints and its peak RSS in GB."""
    proc = subprocess.Popen([sys.executable, script, *args], stdout=subprocess.PIPE)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"bench side {args[:2]} failed with status {status}")
    return json.loads(out), usage.ru_maxrss / 1024 / 1024
