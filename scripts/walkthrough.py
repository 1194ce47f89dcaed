"""The walkthrough: stretto's whole loop on the official filesystem MCP server, end to end.

A scripted agent (no LLM, no key) answers questions about a folder of notes through
stretto-proxy. The script records eight sessions, learns a flow from them, shows it, audits
it on three sessions it never saw, serves it to a new question, replays the three with it,
serves it in shadow mode and promotes the sites that earned it, learns again from all eleven
and compares the two flows — checking every outcome, and exiting non-zero if one is not what
it should be. docs/walkthrough.md tells the same story with real output.

    .venv/bin/python scripts/walkthrough.py [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTES = ROOT / "scripts" / "notes"
FILESYSTEM_SERVER = ROOT / "node" / "node_modules" / ".bin" / "mcp-server-filesystem"
PROXY = Path(sys.executable).parent / "stretto-proxy"
STRETTO = Path(sys.executable).parent / "stretto"
AGENT_MODEL = "scripted-notes-agent"
LOOKED_UP = re.compile(r'^read_text_file \{"path":"((?:[^"\\]|\\.)*)"\}:', re.MULTILINE)

sys.path.insert(0, str(ROOT))
from stretto.logs.episode import read_episode  # noqa: E402
from stretto.stdio_client import StdioClient, result_text  # noqa: E402


@dataclass(frozen=True)
class Task:
    question: str
    pattern: str  # what the agent searches for
    reads: int  # how many of the found files it reads


# The training sessions: each a search, then reading what was found.
TRAINING = [
    Task("What's the status of project alpha?", "**/*alpha*", 1),
    Task("Summarize the September meetings.", "**/2026-09-*", 3),
    Task("What's the status of project beta?", "**/*beta*", 1),
    Task("Summarize the August meetings.", "**/2026-08-*", 2),
    Task("What happened in the late-September meetings?", "**/2026-09-[12]*", 2),
    Task("Summarize every project's notes.", "**/projects/*", 3),
    Task("What did we decide on 2026-09-17?", "**/2026-09-17*", 1),
    Task("Who is on the team?", "**/team*", 1),
]
# Sessions the flow never learns from, to audit it on.
HELD_OUT = [
    Task("Who owns project gamma?", "**/*gamma*", 1),
    Task("What was decided in August?", "**/2026-08-*", 2),
    Task("What is on the roadmap?", "**/*roadmap*", 1),
]
SERVED = Task("Summarize the October meetings.", "**/2026-10-*", 3)


def home_dir(given: str | None) -> Path:
    home = given or os.environ.get("STRETTO_HOME") or "~/.stretto"
    return Path(home).expanduser().resolve()


def run_session(task: Task, logs: Path, workdir: Path, *flow_options: str) -> tuple[Path, dict]:
    """One session of the scripted agent through stretto-proxy: its log, and what it did.

    The agent searches, then reads the files it found — except those the flow already looked
    up for it (it reads the appended results, as an LLM would)."""
    context = workdir / f"context-{len(list(workdir.iterdir()))}.jsonl"
    context.write_text("")
    before = set(logs.glob("*[0-9].jsonl")) if logs.exists() else set()
    command = [
        str(PROXY),
        "--record",
        str(logs),
        "--domain",
        "notes",
        "--agent-model",
        AGENT_MODEL,
        "--context",
        str(context),
        *flow_options,
        "--",
        "node",
        str(FILESYSTEM_SERVER),
        str(NOTES),
    ]
    with StdioClient(command, context_file=context) as agent:
        agent.initialize()
        agent.list_tools()
        agent.say("user", task.question)
        found = agent.call_tool("search_files", {"path": str(NOTES), "pattern": task.pattern})
        text = result_text(found)
        paths = sorted(line for line in text.splitlines() if line.startswith(str(NOTES)))
        given = [json.loads(f'"{p}"') for p in LOOKED_UP.findall(text)]
        calls = 1
        for path in paths[: task.reads]:
            if path not in given:
                result_text(agent.call_tool("read_text_file", {"path": path}))
                calls += 1
        agent.say("assistant", f"I read {min(task.reads, len(paths))} notes about that.")
        status = agent.close()
    if status != 0:
        raise SystemExit(f"walkthrough: stretto-proxy exited with {status}:\n{agent.stderr_text}")
    (log,) = set(logs.glob("*[0-9].jsonl")) - before
    return log, {"calls": calls, "looked_up": len(given), "found": len(paths)}


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"walkthrough: FAILED: {what}")
    print(f"  ok  {what}")


def stretto(*args: str, expect: int = 0) -> str:
    done = subprocess.run([str(STRETTO), *args], capture_output=True, text=True)
    if done.returncode != expect:
        raise SystemExit(
            f"walkthrough: stretto {args[0]} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout + done.stderr


def learn(logs: Path, out: Path, home: Path) -> None:
    said = stretto(
        "learn",
        "--sessions",
        str(logs),
        "--domain",
        "notes",
        "--habit-only",
        "--out",
        str(out),
        "--home",
        str(home),
    )
    print("  " + said.strip())


def record(tasks: list[Task], logs: Path, workdir: Path) -> list[Path]:
    recorded = []
    for task in tasks:
        log, did = run_session(task, logs, workdir)
        calls = [c.name for c in read_episode(log).calls()]
        check(
            calls == ["search_files"] + ["read_text_file"] * task.reads,
            f"{task.question!r}: {len(calls)} calls, as planned",
        )
        recorded.append(log)
    return recorded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", help="STRETTO_HOME (default $STRETTO_HOME, else ~/.stretto)")
    args = parser.parse_args()
    if not FILESYSTEM_SERVER.exists():
        print(f"walkthrough: {FILESYSTEM_SERVER} is missing; run `make setup`", file=sys.stderr)
        return 2
    home = home_dir(args.home)
    run_dir = home / "walkthrough"
    if run_dir.exists():
        shutil.rmtree(run_dir)  # each run tells the story from the start
    logs, held_out, served = run_dir / "logs", run_dir / "held-out", run_dir / "served"
    flows = run_dir / "flows"
    flows.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="stretto-walkthrough-") as tmp:
        workdir = Path(tmp)
        print(f"1. Recording {len(TRAINING)} sessions of the scripted agent into {logs}")
        recorded = record(TRAINING, logs, workdir)

        print("\n2. Learning a flow from them")
        first = flows / "notes.flow.json"
        learn(logs, first, home)
        check(first.exists(), f"the flow is in {first}")

        print("\n3. Reviewing it")
        shown = stretto("flow-show", str(first))
        site = shown[shown.index("### After `search_files`") :].split("\n### ")[0]
        print("\n".join("     " + line for line in site.strip().splitlines()))
        check(
            "looks up read_text_file" in site, "after a search, the flow would read what it found"
        )
        check(
            "- **Never calls** (writes): create_directory, edit_file, move_file, write_file"
            in shown,
            "it never calls the server's four write tools",
        )

        print(f"\n4. Auditing it on {len(HELD_OUT)} sessions it never saw")
        record(HELD_OUT, held_out, workdir)
        report = stretto(
            "audit",
            "--flow",
            str(first),
            "--sessions",
            str(held_out),
            "--out",
            str(run_dir / "audit"),
        )
        for line in report.splitlines()[2:6]:
            print("     " + line)
        agreement = float(re.search(r"Agreement: ([0-9.]+)%", report).group(1))
        check(
            agreement >= 50, f"the flow agrees with the agent's next step {agreement}% of the time"
        )

        print(f"\n5. Serving it: {SERVED.question!r}")
        plain = SERVED.reads + 1
        log, did = run_session(SERVED, served, workdir, "--flow", str(first))
        flow_log = [
            json.loads(line) for line in log.with_suffix(".flow.jsonl").read_text().splitlines()
        ]
        decisions = [d for d in flow_log if "action" in d]
        for d in decisions:
            what = (
                f"looks up {d['tool']} {json.dumps(d['arguments'])}"
                if d["action"] == "lookup"
                else f"hands back: {d['reason']}"
            )
            print(f"     {d['address']} after {d['site']}: {what}")
        check(
            did["calls"] == 1 and did["looked_up"] == SERVED.reads,
            f"the agent made {did['calls']} call where it makes {plain}: the flow read the "
            f"{did['looked_up']} notes for it",
        )
        check(
            decisions[-1]["reason"] == "read_text_file: nothing left to pass as `path`",
            "the flow log says why it stopped: nothing left to pass as `path`",
        )

        print(f"\n6. Replaying the {len(HELD_OUT)} held-out sessions with the flow")
        replayed = json.loads(
            stretto("replay", "--flow", str(first), "--sessions", str(held_out), "--format", "json")
        )["total"]
        print(
            f"     {replayed['turns_saved']} of {replayed['turns']} LLM turns saved "
            f"({replayed['ceiling']} in the read-only ceiling), {replayed['detours']} detours"
        )
        check(
            replayed["turns_saved"] == replayed["ceiling"] > 0,
            "the flow would have saved every turn a read-only speculator could",
        )

        print("\n7. Serving it in shadow mode, then promoting the sites that earned it")
        shadow = run_dir / "shadow"
        for task in HELD_OUT:
            run_session(task, shadow, workdir, "--flow", str(first), "--flow-shadow")
        promoted = flows / "notes.promoted.flow.json"
        report = stretto(
            "promote", "--flow", str(first), "--shadow", str(shadow), "--out", str(promoted)
        )
        for line in report.splitlines():
            if line.startswith("| ") and not line.startswith("| After"):
                print("     " + line)
        record_ = json.loads(promoted.read_text())["promoted"]["sites"]
        check(
            record_.get("search_files", {}).get("promoted") is True,
            "shadow mode earned search_files its promotion: only there will the flow act",
        )

        print("\n8. Learning again from all eleven sessions, and comparing")
        for log_file in held_out.glob("*[0-9].jsonl"):
            shutil.copy(log_file, logs / log_file.name)
        second = flows / "notes.2.flow.json"
        learn(logs, second, home)
        changes = stretto("flow-diff", str(first), str(second))
        check(
            "## Needs review\n\n- nothing" in changes,
            "flow-diff exits 0: the new flow can do nothing the old one could not",
        )

    print(f"\nstretto: the walkthrough's {len(recorded)} + {len(HELD_OUT)} sessions are in {logs}")
    ingest(home, logs)
    return 0


def ingest(home: Path, logs: Path) -> None:
    """Copy the walkthrough's logs under HOME/logs/notes and ingest them into the warehouse."""
    target = home / "logs" / "notes"
    target.mkdir(parents=True, exist_ok=True)
    names = []
    for log in sorted(logs.glob("*[0-9].jsonl")):
        shutil.copy(log, target / log.name)
        names.append(log.stem)
    print(f"\n9. Ingesting the logs into the warehouse under {home / 'warehouse'}")
    print("  " + stretto("ingest", "--home", str(home)).strip())
    query = (
        "SELECT count(DISTINCT session) AS sessions, count(*) AS calls FROM calls "
        f"WHERE session IN ({', '.join(repr(n) for n in names)})"
    )
    (counts,) = json.loads(stretto("sql", query, "--format", "json", "--home", str(home)))
    planned = len(names) + sum(t.reads for t in TRAINING + HELD_OUT)
    check(
        counts == {"sessions": len(names), "calls": planned},
        f"the warehouse holds the {len(names)} sessions and their {planned} calls",
    )
    print(f'\nQuery them: {STRETTO} sql --home {home} "SELECT * FROM calls LIMIT 5"')


if __name__ == "__main__":
    sys.exit(main())
