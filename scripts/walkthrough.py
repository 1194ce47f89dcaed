"""The walkthrough: stretto's whole loop on the official filesystem MCP server, end to end.

A scripted agent (no LLM, no key) answers questions about a folder of notes through
stretto-proxy. The script records eight sessions, learns a flow from them, shows it, audits
it on three sessions it never saw, serves it to a new question, replays the three with it,
serves it in shadow mode and promotes the sites that earned it, serves it exploring and
evaluates other rules, learns again from every session and compares the two flows, and
ingests the sessions for SQL — checking every outcome, and exiting non-zero if one is not what
it should be. Everything goes where stretto keeps it under STRETTO_HOME (README.md, "After
make run"). docs/walkthrough.md tells the same story with real output.

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
from pipeline.learnfolder import learn_cache  # noqa: E402
from stretto.home import Paths  # noqa: E402
from stretto.logs.episode import read_episode  # noqa: E402
from stretto.logs.sessionlog import list_session_logs  # noqa: E402
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


@dataclass(frozen=True)
class Home:
    """Where the walkthrough puts things: where stretto keeps them (stretto.home), under the
    domain `notes`."""

    home: Path

    @property
    def logs(self) -> Path:  # what the proxy records (and what is served a flow)
        return Paths(self.home).logs / "notes"

    @property
    def shadow(self) -> Path:  # served in shadow mode (`stretto init --shadow`)
        return Paths(self.home).shadow / "notes"

    @property
    def explore(self) -> Path:  # served exploring (`stretto init --explore`)
        return Paths(self.home).explore / "notes"

    def flow(self, kind: str = "") -> Path:
        return Paths(self.home).flows / f"notes{'.' + kind if kind else ''}.flow.json"

    def owned(self) -> list[Path]:
        """What an earlier walkthrough left: its session folders and flows."""
        flows = [self.flow(kind) for kind in ("", "promoted", "new")]
        return [self.logs, self.shadow, self.explore, *flows]


def start_afresh(where: Home) -> str | None:
    """Remove what an earlier walkthrough left, so each run tells the story from the start —
    unless something there is not the walkthrough's (sessions of another agent, a flow
    learned from them): then why the walkthrough will not run here."""
    for folder in (where.logs, where.shadow, where.explore):
        for log in folder.glob("*.jsonl") if folder.is_dir() else []:
            if log.name.endswith(".flow.jsonl"):
                continue
            try:
                header = json.loads(log.open("rb").readline())
            except (OSError, ValueError):
                header = {}
            if not isinstance(header, dict) or header.get("agent_model") != AGENT_MODEL:
                return f"{log} is not the walkthrough's"
    for flow in where.owned()[3:]:
        if flow.exists():
            try:
                sources = json.loads(flow.read_text())["provenance"]["sources"]
            except (OSError, ValueError, KeyError, TypeError):
                sources = None
            if sources != [AGENT_MODEL]:
                return f"{flow} is not learned from the walkthrough's sessions"
    forget_ingested(where.home)  # the home's warehouse keeps a session whose log went away
    # learn's own warehouse of logs/notes still holds the sessions removed below; the reports
    # are of its audit and evaluation
    reports = Paths(where.home).reports / "notes"
    earlier = [*reports.glob("audit-*"), *reports.glob("evaluation-*")] if reports.is_dir() else []
    for path in [*where.owned(), learn_cache(where.home, where.logs), *earlier]:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    return None


def forget_ingested(home: Path) -> None:
    """Take the sessions an earlier walkthrough ingested (its agent's) out of the home's
    warehouse, with the ingest lock held (warehouse/upkeep/forget.py)."""
    from warehouse import registry, store
    from warehouse.ingest.run import new_ingest_id
    from warehouse.layout import Layout
    from warehouse.upkeep.forget import forget_sessions

    layout = Layout.at(home)
    if not registry.commit_names(layout):  # no warehouse, or nothing committed
        return
    with store.ingest_lock(layout, 600, lambda message: print(f"walkthrough: {message}")):
        ours = store.query(
            layout, f"SELECT session FROM sessions WHERE header_agent_model = '{AGENT_MODEL}'"
        )
        forget_sessions(layout, ours.column("session").to_pylist(), new_ingest_id())


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


def stretto(*args: str, expect: int = 0, stderr: bool = True) -> str:
    """What `stretto ARGS` printed (with `stderr`, its messages too); a status other than
    `expect` stops the walkthrough."""
    done = subprocess.run([str(STRETTO), *args], capture_output=True, text=True)
    if done.returncode != expect:
        raise SystemExit(
            f"walkthrough: stretto {args[0]} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout + done.stderr if stderr else done.stdout


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


def record(tasks: list[Task], logs: Path, workdir: Path, *flow_options: str) -> list[Path]:
    recorded = []
    for task in tasks:
        log, did = run_session(task, logs, workdir, *flow_options)
        calls = [c.name for c in read_episode(log).calls() if not c.by_proxy]
        if not flow_options or "--flow-shadow" in flow_options:
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
    where = Home(home)
    refused = start_afresh(where)
    if refused:
        print(
            f"walkthrough: {refused}; run it in another home: "
            f"`make run STRETTO_HOME=DIR` (or --home DIR)",
            file=sys.stderr,
        )
        return 2
    logs = where.logs
    with tempfile.TemporaryDirectory(prefix="stretto-walkthrough-") as tmp:
        workdir = Path(tmp)
        held_out = workdir / "held-out"  # joins logs/notes at step 9
        print(f"1. Recording {len(TRAINING)} sessions of the scripted agent into {logs}")
        record(TRAINING, logs, workdir)

        print("\n2. Learning a flow from them")
        first = where.flow()
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
            "audit", "--flow", str(first), "--sessions", str(held_out), "--home", str(home)
        )
        for line in report.splitlines()[2:6]:
            print("     " + line)
        agreement = float(re.search(r"Agreement: ([0-9.]+)%", report).group(1))
        check(
            agreement >= 50, f"the flow agrees with the agent's next step {agreement}% of the time"
        )

        print(f"\n5. Serving it: {SERVED.question!r}")
        plain = SERVED.reads + 1
        log, did = run_session(SERVED, logs, workdir, "--flow", str(first))
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
        record(HELD_OUT, where.shadow, workdir, "--flow", str(first), "--flow-shadow")
        promoted = where.flow("promoted")
        report = stretto(
            "promote", "--flow", str(first), "--shadow", str(where.shadow), "--out", str(promoted)
        )
        for line in report.splitlines():
            if line.startswith("| ") and not line.startswith("| After"):
                print("     " + line)
        record_ = json.loads(promoted.read_text())["promoted"]["sites"]
        check(
            record_.get("search_files", {}).get("promoted") is True,
            "shadow mode earned search_files its promotion: only there will the flow act",
        )

        print(
            "\n8. Serving it exploring (in shadow mode), then estimating what other rules would do"
        )
        # in shadow mode too, so that what the agent then did is not swayed by lookups
        explore = ("--flow-shadow", "--flow-explore", "0.3", "--flow-explore-seed", "7")
        record(HELD_OUT, where.explore, workdir, "--flow", str(first), *explore)
        report = stretto(
            "evaluate",
            "--sessions",
            str(where.explore),
            "--flow",
            str(first),
            "--decider",
            "habit",
            "--threshold",
            "0.3",
            "--threshold",
            "0.5",
            "--json",
            "--home",
            str(home),
            stderr=False,
        )
        evaluated = json.loads(report)
        for result in evaluated:
            total, name = result["total"], result["target"]["name"]
            labelled = total["labelled"]
            print(
                f"     {name}: over {total['decisions']} decisions, "
                f"{labelled['lookups']:g} lookups, {labelled['used']:g} used, "
                f"{labelled['detours']:g} detours"
            )
        check(
            [r["target"]["name"] for r in evaluated] == ["habit@0.3", "habit@0.5"]
            and all(r["total"]["decisions"] > 0 for r in evaluated),
            "evaluate estimated both thresholds from the exploring sessions",
        )

        print(f"\n9. Learning again from every session in {logs}, and comparing")
        for log_file in held_out.iterdir():
            shutil.move(log_file, logs / log_file.name)
        count = len(list_session_logs(logs))
        second = where.flow("new")
        learn(logs, second, home)
        changes = stretto("flow-diff", str(first), str(second))
        check(
            "## Needs review\n\n- nothing" in changes,
            "flow-diff exits 0: the new flow can do nothing the old one could not",
        )

    ingest(home, logs, count)
    print(f"\nWhat the walkthrough left, under {home}:")
    rows = [
        (f"logs/notes/ ({count})", "8 sessions learned from, 1 served the flow, 3 held out"),
        (f"shadow/notes/ ({len(HELD_OUT)})", "served in shadow mode (step 7)"),
        (f"explore/notes/ ({len(HELD_OUT)})", "served in shadow mode, exploring (step 8)"),
        (
            "flows/",
            "notes.flow.json (from the first 8), notes.promoted.flow.json, "
            f"notes.new.flow.json (from all {count})",
        ),
        ("reports/notes/", "the audit's and the evaluation's tables"),
        ("warehouse/", "the sessions under logs/, for `stretto sql`"),
    ]
    for folder, what in rows:
        print(f"  {folder:<20} {what}")
    print('Next: README.md, "After make run".')
    return 0


def ingest(home: Path, logs: Path, count: int) -> None:
    """Ingest the home's logs into its warehouse, and check the walkthrough's are there."""
    names = [log.stem for log in list_session_logs(logs)]
    print(f"\n10. Ingesting the logs into the warehouse under {home / 'warehouse'}")
    print("  " + stretto("ingest", "--home", str(home)).strip())
    query = (
        "SELECT count(DISTINCT session) AS sessions, count(*) FILTER (WHERE NOT by_proxy) "
        f"AS calls FROM calls WHERE session IN ({', '.join(repr(n) for n in names)})"
    )
    (counts,) = json.loads(stretto("sql", query, "--format", "json", "--home", str(home)))
    planned = sum(1 + t.reads for t in TRAINING + HELD_OUT) + 1  # the served session: a search
    check(
        counts == {"sessions": count, "calls": planned},
        f"the warehouse holds the {count} sessions and the agent's {planned} calls",
    )


if __name__ == "__main__":
    sys.exit(main())
