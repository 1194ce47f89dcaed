"""`stretto-proxy --listen` under load (issue 17): 64 MCP sessions at once, each making 500
`tools/call`s one after another, through the proxy over Streamable HTTP, against the same
number of direct stdio connections to the same server, in one run.

- The server is tests/servers/rpc_server.py (plain Python, no SDK: a call costs it little, so
  what is added is the proxy's); each call's arguments name its session and its number, and
  its answer must echo them, so a lost, doubled or crossed answer is counted, not missed.
- Three sides, each with `--sessions` sessions running concurrently: `direct` (one server per
  session, spoken to over its stdin/stdout), and through one `stretto-proxy --listen
  127.0.0.1:0 --record DIR -- server` (one MCP session per client session, its calls posted
  on a kept-alive connection) answered as `json` and as `sse` (the host's Accept). The calls
  go in `--rounds` rounds; in each, the sides take turns (the order rotated), so machine noise
  falls on all alike.
- Each call is timed from writing the request to having read its answer. Reported: p50, p90,
  p99 per side, the added latency (proxied less direct) at p50 and p99, their ratios, the
  proxy's CPU per call; afterwards each session's log is read: every call of its session's
  and none of another's, each answered.

    .venv/bin/python bench/listen.py [--sessions 64] [--calls 500] [--rounds 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sides import Peer, loadavg, percentile  # noqa: E402
from stretto.vocabulary import PROTOCOL_VERSION  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
PROXY = str(Path(PYTHON).parent / "stretto-proxy")
SERVER = [PYTHON, str(ROOT / "tests" / "servers" / "rpc_server.py")]
REUSE_IDLE_S = 2.0  # an HTTP client reuses a kept-alive connection idle no longer than this
ACCEPT = {"json": "application/json", "sse": "application/json, text/event-stream"}


class Tally:
    """What went wrong, by kind, across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.examples: list[str] = []

    def add(self, kind: str, example: str) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if len(self.examples) < 5:
                self.examples.append(f"{kind}: {example[:200]}")


class HttpSession:
    """One MCP session with the proxy over a kept-alive connection."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=120)
        self.auth = f"Bearer {token}"
        self.used = time.monotonic()
        self.session = ""
        status, headers, _ = self.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "stretto-bench", "version": "1"},
                },
            },
            "json",
        )
        if status != 200:
            raise SystemExit(f"initialize through the proxy: HTTP {status}")
        self.session = headers["mcp-session-id"]
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, "json")

    def post(self, message: dict, mode: str) -> tuple[int, dict[str, str], bytes]:
        if time.monotonic() - self.used > REUSE_IDLE_S:
            self.conn.close()  # a server may have closed it meanwhile: the next request opens one
        headers = {
            "Content-Type": "application/json",
            "Accept": ACCEPT[mode],
            "Authorization": self.auth,
        }
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        self.conn.request("POST", "/mcp", body=json.dumps(message).encode(), headers=headers)
        response = self.conn.getresponse()
        body = response.read()
        self.used = time.monotonic()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body

    def call(self, message: dict, mode: str) -> dict:
        status, headers, body = self.post(message, mode)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
        if mode == "sse":
            data = [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]
            answers = [json.loads(d) for d in data]
            return next(a for a in answers if a.get("id") == message["id"])
        return json.loads(body)


def call_message(side: str, session: int, number: int) -> dict:
    arguments = {"side": side, "session": session, "call": number}
    return {
        "jsonrpc": "2.0",
        "id": number,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": arguments},
    }


def check(answer: dict, sent: dict, tally: Tally) -> None:
    if answer.get("id") != sent["id"]:
        tally.add("wrong id", json.dumps(answer))
        return
    try:
        echoed = json.loads(answer["result"]["content"][0]["text"])
    except (KeyError, IndexError, TypeError, ValueError):
        tally.add("error", json.dumps(answer))
        return
    if echoed != sent["params"]["arguments"]:
        tally.add("crossed", f"sent {sent['params']['arguments']}, got {echoed}")


def run_round(side: str, clients: list, first: int, count: int, tally: Tally) -> list[float]:
    """Each client makes `count` calls (numbered from `first`) at once with the others; the
    times in ms."""
    times: list[list[float]] = [[] for _ in clients]

    def work(index: int) -> None:
        client, own = clients[index], times[index]
        for number in range(first, first + count):
            message = call_message(side, index, number)
            try:
                t0 = time.perf_counter()
                if side == "direct":
                    client.send(message)
                    answer = json.loads(client._readline())
                else:
                    answer = client.call(message, side)
                own.append((time.perf_counter() - t0) * 1000)
            except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                tally.add("failed", repr(exc))
                continue
            check(answer, message, tally)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [t for own in times for t in own]


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def check_logs(folder: Path, sessions: int, calls: int, tally: Tally) -> int:
    """Each session's log: exactly its own calls on both proxied sides, each answered."""
    logs = sorted(p for p in folder.glob("*.jsonl") if not p.name.endswith(".flow.jsonl"))
    if len(logs) != sessions:
        tally.add("logs", f"{len(logs)} session logs for {sessions} sessions")
    lines = 0
    for path in logs:
        owners, asked, answered = set(), set(), set()
        with open(path, "rb") as f:
            next(f)
            for raw in f:
                lines += 1
                entry = json.loads(raw)
                message = entry.get("message") or {}
                if message.get("method") == "tools/call":
                    arguments = message["params"]["arguments"]
                    owners.add(arguments["session"])
                    asked.add((arguments["side"], message["id"]))
                elif entry["from"] == "server" and "result" in message:
                    answered.add(message["id"])
        if len(owners) != 1 or len(asked) != 2 * calls:
            tally.add("log", f"{path.name}: sessions {sorted(owners)}, {len(asked)} calls")
        if not {number for _, number in asked} <= answered:
            tally.add("log", f"{path.name}: calls without an answer")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--calls", type=int, default=500, help="per session and side")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    per_round = args.calls // args.rounds
    calls = per_round * args.rounds
    tally = Tally()
    workdir = Path(tempfile.mkdtemp(prefix="stretto-bench-listen-"))
    logs = workdir / "logs"
    token = secrets.token_hex(32)
    (workdir / "token").write_text(token + "\n")
    (workdir / "token").chmod(0o600)  # the owner's alone, or the proxy refuses it
    proxy = subprocess.Popen(
        [PROXY, "--listen", "127.0.0.1:0", "--listen-token-file", str(workdir / "token")]
        + ["--record", str(logs), "--", *SERVER],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proxy.stderr is not None
    ready = proxy.stderr.readline()
    if "listening on http://" not in ready:
        raise SystemExit(f"the proxy did not listen: {ready}")
    threading.Thread(target=proxy.stderr.read, daemon=True).start()  # keep its pipe open
    address = ready.split("//")[1].split("/")[0]
    host, port = address.rsplit(":", 1)

    print(f"starting {args.sessions} servers and {args.sessions} proxied sessions", file=sys.stderr)
    direct = [Peer(SERVER) for _ in range(args.sessions)]
    for peer in direct:
        peer.initialize()
    proxied = [HttpSession(host, int(port), token) for _ in range(args.sessions)]
    load_before = loadavg()
    times: dict[str, list[float]] = {"direct": [], "json": [], "sse": []}
    sides = list(times)
    cpu_before, wall_start = cpu_s(proxy.pid), time.perf_counter()
    for r in range(args.rounds):
        order = sides[r % 3 :] + sides[: r % 3]
        for side in order:
            clients = direct if side == "direct" else proxied
            times[side] += run_round(side, clients, r * per_round, per_round, tally)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    wall = time.perf_counter() - wall_start
    load_after = loadavg()
    proxy_cpu = cpu_s(proxy.pid) - cpu_before

    for peer in direct:
        peer.close()
    for client in proxied:
        client.conn.close()
    proxy.send_signal(signal.SIGTERM)
    status = proxy.wait(120)
    if status != 0:
        tally.add("proxy", f"exit status {status}")
    log_lines = check_logs(logs, args.sessions, calls, tally)
    shutil.rmtree(workdir, ignore_errors=True)

    expected = args.sessions * calls
    for side, values in times.items():
        if len(values) != expected:
            tally.add("lost", f"{side}: {len(values)} answers timed of {expected}")
    figures: dict = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "sessions": args.sessions,
        "calls_per_session_and_side": calls,
        "loadavg_before": round(load_before, 2),
        "loadavg_after": round(load_after, 2),
        "log_lines_checked": log_lines,
        "problems": tally.counts,
        "examples": tally.examples,
        "sides": {},
    }
    direct_p = {p: percentile(times["direct"], p) for p in (50, 90, 99)}
    print(
        f"\n{args.sessions} sessions x {calls} calls per side, {args.rounds} rounds, {wall:.0f} s"
    )
    print("| side | p50 ms | p90 ms | p99 ms | added p50 | added p99 | p50 ratio | p99 ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for side, values in times.items():
        p = {q: percentile(values, q) for q in (50, 90, 99)}
        row = {f"p{q}_ms": round(v, 3) for q, v in p.items()}
        if side != "direct":
            row |= {
                "added_p50_ms": round(p[50] - direct_p[50], 3),
                "added_p99_ms": round(p[99] - direct_p[99], 3),
                "ratio_p50": round(p[50] / direct_p[50], 2),
                "ratio_p99": round(p[99] / direct_p[99], 2),
            }
        figures["sides"][side] = row
        extra = (
            f"{row['added_p50_ms']:+.3f} | {row['added_p99_ms']:+.3f} | "
            f"{row['ratio_p50']:.2f}x | {row['ratio_p99']:.2f}x"
            if side != "direct"
            else " | | | "
        )
        print(f"| {side} | {p[50]:.3f} | {p[90]:.3f} | {p[99]:.3f} | {extra} |")
    per_call_us = proxy_cpu / (2 * expected) * 1e6
    figures["proxy_cpu_per_call_us"] = round(per_call_us, 1)
    print(f"\nproxy CPU per proxied call: {per_call_us:.0f} µs")
    print(f"load average: {load_before:.2f} before, {load_after:.2f} after")
    print(f"log lines checked: {log_lines}; problems: {tally.counts or 'none'}")
    for example in tally.examples:
        print(f"  {example}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if tally.counts else 0


if __name__ == "__main__":
    sys.exit(main())
