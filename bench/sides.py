"""The sides of a benchmark: one run in a process of its own, so that its peak memory is its own
(`run_side`); two sides alternating in one run (`alternate`), and a child speaking JSON-RPC
on its stdin/stdout (`Peer`)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from stretto.vocabulary import PROTOCOL_VERSION


def run_side(script: str, args: list[str]) -> tuple[dict, float]:
    """Run `script` with `args` in a child process: the JSON it prints and its peak RSS in GB."""
    proc = subprocess.Popen([sys.executable, script, *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"bench side {args[:2]} failed with status {status}")
    return json.loads(out), usage.ru_maxrss / 1024 / 1024


# Two sides of one measurement, alternating ---------------------------------------------------


def alternate(sides: dict, reps: int, quiet_gc: bool = False) -> dict[str, list[float]]:
    """Call each side `reps` times, one of each in turn, the order rotated every round so
    that no side always runs first (or right after another): {side: [what it returned]}."""
    import gc

    names = list(sides)
    samples: dict[str, list[float]] = {name: [] for name in names}
    if quiet_gc:
        gc.collect()
        gc.disable()
    try:
        for rep in range(reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(sides[name]())
    finally:
        gc.enable()
    return samples


def first_line_ms(command: list[str], line: bytes, expect: bytes) -> float:
    """Spawn `command` and write `line` at once: ms until a line containing `expect` comes
    back (the process is ended afterwards, untimed)."""
    started = time.perf_counter_ns()
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        os.write(proc.stdin.fileno(), line)
        answer = proc.stdout.readline()
        elapsed = (time.perf_counter_ns() - started) / 1e6
        if expect not in answer:
            raise SystemExit(f"{command}: expected {expect!r} back, got {answer[:200]!r}")
        return elapsed
    finally:
        proc.stdin.close()
        proc.wait(30)
        proc.stdout.close()


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def loadavg() -> float:
    """The 1-minute load average (0 where the system has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


class Peer:
    """A long-lived child speaking newline-delimited JSON-RPC on its stdin/stdout, driven in a
    tight blocking loop (no client threads on the timed path)."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=1 << 16,  # reads of a pipe's size, as an HTTP client's socket reads
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin, self._stdout = self.proc.stdin, self.proc.stdout
        self._in = self._stdin.fileno()
        self._readline = self._stdout.readline
        self.next_id = 1

    def send(self, message: dict) -> None:
        os.write(self._in, json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def request(self, method: str, params: dict) -> dict:
        request_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            line = self._readline()
            if not line:
                raise SystemExit(f"{self.command} closed its output before answering {method}")
            answer = json.loads(line)
            if isinstance(answer, dict) and answer.get("id") == request_id:
                return answer

    def initialize(self) -> None:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "stretto-bench", "version": "1"},
        }
        if "result" not in self.request("initialize", params):
            raise SystemExit(f"{self.command}: initialize failed")
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool: str, arguments: dict) -> dict:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def timed_call(self, key: str) -> int:
        """One `lookup` round trip: ns from writing the request to reading its answer."""
        request_id = self.next_id
        self.next_id += 1
        line = (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":'
            b'{"name":"lookup","arguments":{"key":"%s"}}}\n' % (request_id, key.encode())
        )
        fd, readline, clock = self._in, self._readline, time.perf_counter_ns
        started = clock()
        os.write(fd, line)
        while True:
            answer = readline()
            elapsed = clock() - started
            if not answer:
                raise SystemExit(f"{self.command} closed its output during the benchmark")
            if json.loads(answer).get("id") == request_id:  # skip a notification
                return elapsed

    def stream(self, data: bytes, lines: int) -> float:
        """Write `data` (from a thread, as fast as the pipe takes it) and read `lines` lines
        back: ms from the first byte written to the last line read."""
        import threading

        def write() -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(self._in, view[: 1 << 16]) :]

        started = time.perf_counter_ns()
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        readline = self._readline
        for _ in range(lines):
            if not readline():
                raise SystemExit(f"{self.command} closed its output during the benchmark")
        elapsed = (time.perf_counter_ns() - started) / 1e6
        writer.join()
        return elapsed

    def cpu_s(self) -> float:
        """CPU seconds the child itself has used so far (user + system; not its children)."""
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return float("nan")
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self, timeout: float = 30.0) -> None:
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stdout.close()


# MCP over Streamable HTTP, directly -----------------------------------------------------------

# A fresh process that posts one line to the server and prints the answer: the direct side of
# the HTTP start-up, doing what the proxy must do before its first answer.
HTTP_CLIENT = (
    "import http.client, sys\n"
    "c = http.client.HTTPConnection('127.0.0.1', int(sys.argv[1]))\n"
    "c.request('POST', '/mcp', body=sys.stdin.buffer.readline().strip(), headers={"
    "'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream'})\n"
    "sys.stdout.buffer.write(c.getresponse().read().strip() + b'\\n')\n"
    "sys.stdout.flush()\n"
)
INITIALIZE = (
    json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "stretto-bench", "version": "1"},
            },
        }
    ).encode()
    + b"\n"
)


class HttpClient:
    """A direct MCP client over Streamable HTTP: one kept-alive connection, JSON answers."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port)
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        self.next_id = 2
        self.post(INITIALIZE.strip())
        self.headers["MCP-Protocol-Version"] = PROTOCOL_VERSION
        self.post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def post(self, body: bytes) -> bytes:
        self.conn.request("POST", "/mcp", body=body, headers=self.headers)
        response = self.conn.getresponse()
        session = response.getheader("Mcp-Session-Id")
        if session:
            self.headers["Mcp-Session-Id"] = session
        return response.read()

    def call(self, tool: str, arguments: dict) -> bytes:
        request_id, self.next_id = self.next_id, self.next_id + 1
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call"}
        body["params"] = {"name": tool, "arguments": arguments}
        return self.post(json.dumps(body).encode())

    def timed_call(self, key: str) -> float:
        started = time.perf_counter_ns()
        self.call("lookup", {"key": key})
        return (time.perf_counter_ns() - started) / 1e6
