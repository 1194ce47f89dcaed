"""What the tests build and share: session logs written line by line (LogBuilder), the shop's
tools and sessions, the `stretto` command run in this process, and the oracle's synthetic
cases and answers. Test modules import from here (or a conftest), never from each other."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from stretto.logs.episode import read_episode

if TYPE_CHECKING:
    from stretto.oracle.scores import Case

T = TypeVar("T")

# --- waiting for something to happen ------------------------------------------------------


def wait_until(
    condition: Callable[[], T], what: str, within_s: float = 60.0, every_s: float = 0.01
) -> T:
    """What `condition` gives once it gives something true, asked every `every_s`. The
    deadline is a bound on a broken run (it fails naming `what`), not a speed limit: a slow
    machine's working run is far inside it."""
    deadline = time.monotonic() + within_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"never happened within {within_s} s: {what}"
        time.sleep(every_s)
    return found


async def until(
    condition: Callable[[], T], what: str, within_s: float = 60.0, every_s: float = 0.01
) -> T:
    """`wait_until` inside an event loop (anyio): the loop runs on between the polls."""
    import anyio  # only the tests that run an event loop pay for it

    deadline = time.monotonic() + within_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"never happened within {within_s} s: {what}"
        await anyio.sleep(every_s)
    return found


# --- the `stretto` command, in this process -------------------------------------------------


@dataclass
class Completed:
    """What a finished `stretto` command left, as subprocess.run(..., text=True) gives it."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def stretto(
    *args: str | Path,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    input: str | None = None,
) -> Completed:
    """Run `stretto ARGS` in this process (no interpreter and no Dagster import to pay for)
    and return its exit status and output. `env` replaces the environment while it runs, as a
    child's environment would; an exception that escapes the command ends it as it would end
    the process: its traceback on stderr and status 1."""
    from stretto.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with _environment(env), _cwd(cwd), _stdin(input):
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors, --help, --version
                code = _exit_status(exc.code, err)
            except Exception:  # noqa: BLE001 - as the interpreter would end the process
                traceback.print_exc(file=err)
                code = 1
    return Completed(["stretto", *argv], code, out.getvalue(), err.getvalue())


def _exit_status(code: object, err: io.StringIO) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=err)  # sys.exit("message"): the message on stderr, status 1
    return 1


@contextlib.contextmanager
def _environment(env: dict[str, str] | None) -> Iterator[None]:
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _cwd(cwd: str | Path | None) -> Iterator[None]:
    if cwd is None:
        yield
        return
    with contextlib.chdir(cwd):
        yield


@contextlib.contextmanager
def _stdin(text: str | None) -> Iterator[None]:
    if text is None:
        yield
        return
    saved = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        yield
    finally:
        sys.stdin = saved


def learn(sessions: Path, out: Path, home: Path, *extra: str, domain: str = "shop") -> Completed:
    """`stretto learn --habit-only` from a folder of session logs, in this process."""
    return stretto(
        "learn",
        "--sessions",
        sessions,
        "--domain",
        domain,
        "--habit-only",
        "--out",
        out,
        "--home",
        home,
        *extra,
    )


# --- session logs -------------------------------------------------------------------------

HEADER = {
    "stretto_mcp_log": 2,
    "session": "s-1",
    "started_unix_ms": 0,
    "server_command": [],
    "domain": None,
    "agent_model": None,
}


class LogBuilder:
    """A session log, line by line: the header, then messages with their times."""

    def __init__(self) -> None:
        self.lines: list[dict] = [HEADER]

    def client_call(self, t: int, call_id: object, name: str, **arguments: object) -> LogBuilder:
        return self._add(
            t,
            "client",
            {
                "jsonrpc": "2.0",
                "id": call_id,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            },
        )

    def proxy_call(self, t: int, call_id: object, name: str, **arguments: object) -> LogBuilder:
        return self._add(
            t,
            "proxy",
            {
                "jsonrpc": "2.0",
                "id": call_id,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            },
        )

    def result(
        self, t: int, call_id: object, text: str, error: bool = False, sender: str = "server"
    ) -> LogBuilder:
        return self._add(
            t,
            sender,
            {
                "jsonrpc": "2.0",
                "id": call_id,
                "result": {"content": [{"type": "text", "text": text}], "isError": error},
            },
        )

    def say(self, t: int, role: str, content: str) -> LogBuilder:
        return self._add(t, "context", {"role": role, "content": content})

    def _add(self, t: int, sender: str, message: dict) -> LogBuilder:
        self.lines.append({"t_ms": t, "from": sender, "message": message})
        return self

    def episode(self, tmp_path: Path):
        path = tmp_path / "s-1.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        return read_episode(path)


# --- the shop: four tools, and formats §3.11's session --------------------------------------

SHOP_TOOLS = {
    "tools": [
        {
            "name": n,
            "annotations": {"readOnlyHint": hint},
            "inputSchema": {
                "type": "object",
                "properties": {a: {"type": "string"}},
                "required": [a],
            },
        }
        for n, a, hint in [
            ("find_account", "email", True),
            ("get_account", "account", True),
            ("get_order", "order", True),
            ("close_order", "order", False),
        ]
    ]
}


def shop_log(index: int) -> LogBuilder:
    """formats §3.11's session: find_account, get_account, get_order twice, a reply the user
    answers, close_order."""
    b = LogBuilder()
    b.lines[0] = {**HEADER, "session": f"s-{index}", "started_unix_ms": index, "domain": "shop"}
    b._add(0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
    b._add(1, "server", {"jsonrpc": "2.0", "id": 0, "result": SHOP_TOOLS})
    email = f"c{index}@example.com"
    b.say(2, "user", f"I'm {email}")
    b.client_call(10, 1, "find_account", email=email).result(11, 1, f"acct_{index}")
    b.client_call(1000, 2, "get_account", account=f"acct_{index}")
    b.result(1001, 2, json.dumps({"orders": [f"X{index}", f"Y{index}"]}))
    b.client_call(2000, 3, "get_order", order=f"X{index}").result(2001, 3, '{"status": "open"}')
    b.client_call(3000, 4, "get_order", order=f"Y{index}").result(3001, 4, '{"status": "open"}')
    b.say(4000, "assistant", "You have two open orders.").say(5000, "user", "Close the first.")
    b.client_call(6000, 5, "close_order", order=f"X{index}").result(6001, 5, "closed")
    return b


def write_logs(folder: Path, builders: list[LogBuilder]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for b in builders:
        (folder / f"{b.lines[0]['session']}.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in b.lines)
        )
    return folder


# --- the oracle: a System-One server's answers, synthetic cases, a small flow ---------------

KEY = "ts-test-key-42"  # the API key the jev:// tests' server accepts


def systemone(seen):
    """The `POST /v1/systemone` route of a local API server (tests/stretto/oracle/apiserver.py): the
    first criterion at 0.7, a `noul` question at 0.8; 401 without the key."""
    if seen.headers.get("authorization") != f"Bearer {KEY}":
        return 401, {}, {"error": {"type": "authentication_error", "message": "invalid API key"}}
    answers = {}
    for qid, question in seen.body["questions"].items():
        if question["type"] == "noul":
            answers[qid] = {"type": "noul", "noul": 0.8}
        else:
            names = sorted(question["criteria"])
            probs = {n: (0.7 if n == names[0] else 0.3 / (len(names) - 1)) for n in names}
            answers[qid] = {
                "type": "choice",
                "choice": names[0],
                "confidence": 0.7,
                "probabilities": probs,
            }
    return (
        200,
        {"x-typesafe-request-id": "req_123"},
        {
            "model": "jev-1.14.0",
            "answers": answers,
            "usage": {"input_tokens": 318, "output_tokens": 34},
        },
    )


def synthetic_cases(seed: int, n: int = 1500, tasks: int = 30) -> list[Case]:
    """Decisions where the agent does what the model's `next` answer says, in proportion: the
    weight of ln one-question should come out near 1, the others near 0."""
    import numpy as np

    from stretto.oracle.request import yes_no
    from stretto.oracle.scores import make_case
    from stretto.vocabulary import RESPOND

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        lookups = ["get_order", "get_user"] if i % 3 else ["get_order"]
        options = sorted([*lookups, RESPOND])
        habit = dict(zip(lookups, rng.dirichlet(np.ones(len(lookups) + 1))[:-1], strict=False))
        nxt = dict(zip(options, rng.dirichlet(np.ones(len(options))), strict=True))
        answers = {"next": nxt, "go_on": yes_no(float(rng.uniform()))}
        if len(lookups) > 1:
            answers["tool"] = dict(zip(lookups, rng.dirichlet(np.ones(2)), strict=True))
        actual = options[int(rng.choice(len(options), p=[nxt[o] for o in options]))]
        out.append(
            make_case(
                site="get_user" if i % 2 else "find_user",
                prev="get_user",
                lookups=lookups,
                habit=habit,
                answers=answers,
                actual=actual,
                task=f"task-{i % tasks}",
            )
        )
    return out


def small_flow() -> dict:
    """A shop flow of two reads, built without learning."""
    from stretto.model.flow import build_flow

    return build_flow(
        domain="shop",
        kinds={"get_user": "read", "get_order": "read"},
        docs={},
        contracts={},
        habit={(): {"get_user": 2.0, "get_order": 1.0}},
        reach={(): {"get_user": 2.0}},
        sites={("get_user", False): {"get_order": 1, "get_user": 1}},
        alpha_fit={"alpha": 1.0},
        sources=[],
        episodes=1,
        steps=3,
        now_ms=0,
    )


# --- slow connections (slowloris) -----------------------------------------------------------


def with_descriptors(limit: int):
    """A subprocess's preexec_fn: the child may hold at most `limit` descriptors (soft and
    hard), as many systems' default of 1,024 allows."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return limited


@contextlib.contextmanager
def slow_connections(port: int, count: int, source: str = "127.0.0.1") -> Iterator[list]:
    """`count` connections from `source` to 127.0.0.1:`port`, each sending half a request
    line and nothing more (slowloris); the sockets, closed at the end. This process's limit on
    descriptors is raised as far as they need (and put back); skipped when it cannot be."""
    import resource
    import selectors
    import socket

    import pytest

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = count + 512
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"{count} connections need {needed} descriptors; the limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    sockets: list[socket.socket] = []
    chooser = selectors.DefaultSelector()
    try:
        for _ in range(count):
            sock = socket.socket()
            sockets.append(sock)
            sock.bind((source, 0))
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            chooser.register(sock, selectors.EVENT_WRITE)
        while chooser.get_map():
            ready = chooser.select(timeout=30)  # none in 30 s: the rest are never accepted
            if not ready:
                break
            for key, _ in ready:
                chooser.unregister(key.fileobj)
                sock = key.fileobj  # type: ignore[assignment]
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    with contextlib.suppress(OSError):
                        sock.send(b"POST /mcp HTT")
        yield sockets
    finally:
        chooser.close()
        for sock in sockets:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def answers_to(sockets: list, patience_s: float = 60.0) -> dict[str, int]:
    """What the server did with each of `sockets`: its status line's code ("503", "408"),
    "closed" (closed or reset without an answer), or "held" (nothing for `patience_s` seconds
    while others were answered: the server holds it). Counts of each."""
    import selectors
    from collections import Counter

    seen: Counter[str] = Counter()
    chooser = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        chooser.register(sock, selectors.EVENT_READ)
    while chooser.get_map():
        ready = chooser.select(timeout=patience_s)
        if not ready:
            break
        for key, _ in ready:
            chooser.unregister(key.fileobj)
            try:
                first = key.fileobj.recv(64)  # type: ignore[union-attr]
            except OSError:
                first = b""
            code = first.split(b" ")[1].decode() if first.startswith(b"HTTP/1.1 ") else "closed"
            seen[code] += 1
    seen["held"] += len(chooser.get_map())
    chooser.close()
    return dict(seen)
