"""What stretto-proxy costs an MCP host: added latency per call, and added start-up.

Latency. Two long-lived copies of the same real MCP server (by default the project's test
server, tests/servers/demo_server.py, speaking MCP over stdio; `--server echo` uses the byte
echo server instead): one is driven directly, the other through
`stretto-proxy --record <tmp dir> -- <server>`. Both are initialized (initialize, then
notifications/initialized) and warmed up with untimed calls; then N `tools/call` requests to
the read-only tool `lookup` are made to each, interleaved: one direct, one proxied, the
order swapped on every pair, so that machine noise falls on both sides alike. Each round trip
is timed with time.perf_counter_ns from just before the request line is written to the
subprocess pipe to just after the answer line is read back (a tight, blocking loop on the
pipes: no client threads, no queues). Reported: p50/p90/p99 of both, the added latency (the
difference of the same percentile, and the median of the per-pair differences) and the
ratios proxied/direct.

Start-up. Repeated interleaved: spawn a process, write one JSON line at once, and time from
just before the spawn until the line comes back. (a) the echo server directly, (b) the echo
server through `stretto-proxy --record <tmp dir>`; then `cat` directly vs
`stretto-proxy -- cat`, which isolates the proxy's own start-up from the Python echo
server's. Reported: medians, the added start-up and the ratios.

Goals are printed next to the figures; nothing is asserted. `--json FILE` also writes the
figures as JSON. Every process and temp dir is cleaned up.

    .venv/bin/python bench/proxy_overhead.py [--calls N] [--server demo|echo] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
DEMO_SERVER = ROOT / "tests" / "servers" / "demo_server.py"
ECHO_SERVER = ROOT / "tests" / "servers" / "echo_server.py"
PROTOCOL_VERSION = "2025-06-18"

GOAL_P50_ADDED_MS = 0.3
GOAL_STARTUP_ADDED_MS = 150.0
STALL_S = 60.0  # the watchdog kills the children if no answer arrives for this long


def proxy_command() -> list[str]:
    beside = Path(PYTHON).parent / "stretto-proxy"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("stretto-proxy")
    if found:
        return [found]
    return [PYTHON, "-m", "proxy"]


class BenchError(RuntimeError):
    pass


class Peer:
    """A long-lived child speaking newline-delimited JSON-RPC on its stdin/stdout."""

    def __init__(self, command: list[str], stderr_path: Path) -> None:
        self.command = command
        self._stderr = open(stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            bufsize=1 << 16,
        )
        self._in_fd = self.proc.stdin.fileno()
        self._readline = self.proc.stdout.readline
        self.next_id = 1

    def send(self, message: dict) -> None:
        os.write(self._in_fd, json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def request(self, method: str, params: dict) -> dict:
        request_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            line = self._readline()
            if not line:
                raise BenchError(f"{self.command} closed its output before answering {method}")
            answer = json.loads(line)
            if isinstance(answer, dict) and answer.get("id") == request_id:
                return answer

    def initialize(self) -> None:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "stretto-bench", "version": "1"},
        }
        answer = self.request("initialize", params)
        if "result" not in answer:
            raise BenchError(f"initialize failed: {answer}")
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def timed_call(self, key: str) -> int:
        """One tools/call round trip; nanoseconds from write to the answer line read back."""
        request_id = self.next_id
        self.next_id += 1
        line = (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":'
            b'{"name":"lookup","arguments":{"key":"%s"}}}\n' % (request_id, key.encode())
        )
        fd, readline, clock = self._in_fd, self._readline, time.perf_counter_ns
        t0 = clock()
        os.write(fd, line)
        while True:
            answer = readline()
            t1 = clock()
            if not answer:
                raise BenchError(f"{self.command} closed its output during the benchmark")
            if json.loads(answer).get("id") == request_id:  # skip any notification
                return t1 - t0

    def close(self, timeout: float = 10.0) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self._stderr.close()


class Watchdog:
    """Kills the given processes if `tick()` is not called for STALL_S seconds."""

    def __init__(self, procs: list[subprocess.Popen]) -> None:
        self.procs = procs
        self.last = time.monotonic()
        self.fired = False
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def tick(self) -> None:
        self.last = time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            if time.monotonic() - self.last > STALL_S:
                self.fired = True
                for proc in self.procs:
                    if proc.poll() is None:
                        proc.kill()
                return

    def stop(self) -> None:
        self._stop.set()


# statistics ---------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def ms(ns: float) -> float:
    return ns / 1e6


# latency ------------------------------------------------------------------------------------


def server_command(kind: str) -> list[str]:
    return [PYTHON, str(DEMO_SERVER if kind == "demo" else ECHO_SERVER)]


def measure_latency(kind: str, calls: int, warmup: int, tmp: Path) -> dict:
    record_dir = tmp / "latency-record"
    direct = Peer(server_command(kind), tmp / "direct.stderr")
    proxied = Peer(
        [*proxy_command(), "--record", str(record_dir), "--", *server_command(kind)],
        tmp / "proxied.stderr",
    )
    watchdog = Watchdog([direct.proc, proxied.proc])
    try:
        if kind == "demo":
            direct.initialize()
            proxied.initialize()
        for i in range(warmup):
            direct.timed_call(f"warm{i}")
            proxied.timed_call(f"warm{i}")
        watchdog.tick()
        d_ns: list[int] = [0] * calls
        p_ns: list[int] = [0] * calls
        gc.collect()
        gc.disable()
        try:
            for i in range(calls):
                key = f"k{i}"
                if i % 2 == 0:
                    d_ns[i] = direct.timed_call(key)
                    p_ns[i] = proxied.timed_call(key)
                else:
                    p_ns[i] = proxied.timed_call(key)
                    d_ns[i] = direct.timed_call(key)
                if i % 256 == 0:
                    watchdog.tick()
        finally:
            gc.enable()
    except (BenchError, OSError) as exc:
        if watchdog.fired:
            raise BenchError(f"no answer for {STALL_S:.0f} s; the servers were killed") from exc
        raise
    finally:
        watchdog.stop()
        direct.close()
        proxied.close()
    logs = sorted(record_dir.glob("*.jsonl"))
    log_lines = sum(1 for log in logs for _ in log.open("rb"))
    log_bytes = sum(log.stat().st_size for log in logs)

    direct_ms = [ms(v) for v in d_ns]
    proxied_ms = [ms(v) for v in p_ns]
    diffs = [p - d for p, d in zip(proxied_ms, direct_ms, strict=True)]
    out: dict = {"server": kind, "calls": calls, "warmup": warmup}
    for name, values in (("direct", direct_ms), ("proxied", proxied_ms)):
        out[name] = {
            "p50_ms": percentile(values, 50),
            "p90_ms": percentile(values, 90),
            "p99_ms": percentile(values, 99),
            "mean_ms": statistics.fmean(values),
            "max_ms": max(values),
        }
    out["added"] = {
        "p50_ms": out["proxied"]["p50_ms"] - out["direct"]["p50_ms"],
        "p90_ms": out["proxied"]["p90_ms"] - out["direct"]["p90_ms"],
        "p99_ms": out["proxied"]["p99_ms"] - out["direct"]["p99_ms"],
        "median_pair_diff_ms": statistics.median(diffs),
    }
    out["ratio"] = {
        q: out["proxied"][f"{q}_ms"] / out["direct"][f"{q}_ms"] for q in ("p50", "p90", "p99")
    }
    out["record"] = {"logs": len(logs), "lines": log_lines, "bytes": log_bytes}
    out["goal_p50_added_ms"] = GOAL_P50_ADDED_MS
    out["goal_p50_added_met"] = out["added"]["p50_ms"] <= GOAL_P50_ADDED_MS
    return out


# start-up -----------------------------------------------------------------------------------

PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'


def first_echo_ms(command: list[str], timeout: float = 30.0) -> float:
    """Spawn `command`, write one line at once; ms until the line comes back. Then clean up."""
    t0 = time.perf_counter_ns()
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        os.write(proc.stdin.fileno(), PING)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            line = proc.stdout.readline()
            t1 = time.perf_counter_ns()
        finally:
            timer.cancel()
        if line != PING:
            raise BenchError(f"{command}: expected the line back, got {line[:200]!r}")
        return ms(t1 - t0)
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def measure_startup(reps: int, tmp: Path) -> dict:
    echo = [PYTHON, str(ECHO_SERVER)]
    cat = shutil.which("cat") or "cat"
    cases = {
        "echo_direct": echo,
        "echo_proxied": [*proxy_command(), "--record", str(tmp / "startup-record"), "--", *echo],
        "cat_direct": [cat],
        "cat_proxied": [*proxy_command(), "--", cat],
    }
    names = list(cases)
    for name in names:  # one untimed round to warm the page cache
        first_echo_ms(cases[name])
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]  # rotate the order
        for name in order:
            samples[name].append(first_echo_ms(cases[name]))
    out: dict = {"reps": reps}
    for name in names:
        out[name] = {
            "median_ms": statistics.median(samples[name]),
            "min_ms": min(samples[name]),
            "p90_ms": percentile(samples[name], 90),
        }
    for base in ("echo", "cat"):
        direct, proxied = out[f"{base}_direct"]["median_ms"], out[f"{base}_proxied"]["median_ms"]
        out[f"{base}_added_ms"] = proxied - direct
        out[f"{base}_ratio"] = proxied / direct
    out["goal_added_ms"] = GOAL_STARTUP_ADDED_MS
    out["goal_added_met"] = out["echo_added_ms"] <= GOAL_STARTUP_ADDED_MS
    return out


# report -------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def report(lat: dict, start: dict) -> str:
    d, p, a, r = lat["direct"], lat["proxied"], lat["added"], lat["ratio"]
    rows = [
        f"stretto-proxy overhead   python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "",
        f"Latency: {lat['calls']} tools/call round trips each, interleaved "
        f"({lat['warmup']} warm-up), server: {lat['server']}; proxy records",
        f"  {'':<24}{'p50':>10}{'p90':>10}{'p99':>10}{'mean':>10}{'max':>10}   (ms)",
    ]
    for label, s in (("direct", d), ("proxied (--record)", p)):
        rows.append(
            f"  {label:<24}{s['p50_ms']:>10.3f}{s['p90_ms']:>10.3f}{s['p99_ms']:>10.3f}"
            f"{s['mean_ms']:>10.3f}{s['max_ms']:>10.3f}"
        )
    rows += [
        f"  {'added (same pctile)':<24}{a['p50_ms']:>10.3f}{a['p90_ms']:>10.3f}"
        f"{a['p99_ms']:>10.3f}",
        f"  {'ratio proxied/direct':<24}{r['p50']:>10.2f}{r['p90']:>10.2f}{r['p99']:>10.2f}",
        f"  median of per-pair differences: {a['median_pair_diff_ms']:.3f} ms",
        f"  goal: p50 added <= {GOAL_P50_ADDED_MS} ms  ->  {a['p50_ms']:.3f} ms, "
        f"{verdict(lat['goal_p50_added_met'])}",
        f"  recorded: {lat['record']['logs']} log(s), {lat['record']['lines']} lines, "
        f"{lat['record']['bytes'] / 1e6:.2f} MB",
        "",
        f"Start-up to first forwarded byte: spawn + write one line, time until it is back "
        f"(median of {start['reps']}, interleaved)",
        f"  {'':<34}{'direct':>10}{'proxied':>10}{'added':>10}{'ratio':>8}   (ms)",
    ]
    for base, label in (
        ("echo", "echo_server.py (proxy --record)"),
        ("cat", "cat (proxy, no record)"),
    ):
        rows.append(
            f"  {label:<34}{start[f'{base}_direct']['median_ms']:>10.1f}"
            f"{start[f'{base}_proxied']['median_ms']:>10.1f}{start[f'{base}_added_ms']:>10.1f}"
            f"{start[f'{base}_ratio']:>8.2f}"
        )
    rows.append(
        f"  goal: start-up added <= {GOAL_STARTUP_ADDED_MS:.0f} ms  ->  "
        f"{start['echo_added_ms']:.1f} ms, {verdict(start['goal_added_met'])}"
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000, help="timed calls per side (5000)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls per side (200)")
    parser.add_argument("--server", choices=("demo", "echo"), default="demo")
    parser.add_argument("--startup-reps", type=int, default=30, metavar="N")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.warmup < 0 or args.startup_reps < 1:
        parser.error("--calls and --startup-reps must be positive, --warmup not negative")

    with tempfile.TemporaryDirectory(prefix="stretto-bench-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            lat = measure_latency(args.server, args.calls, args.warmup, tmp)
            start = measure_startup(args.startup_reps, tmp)
        except BenchError as exc:
            print(f"proxy_overhead: {exc}", file=sys.stderr)
            for stderr_file in sorted(tmp.glob("*.stderr")):
                text = stderr_file.read_text(errors="replace").strip()
                if text:
                    print(f"--- {stderr_file.name}\n{text[-2000:]}", file=sys.stderr)
            return 1
    print(report(lat, start))
    if args.json:
        figures = {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "proxy_command": proxy_command(),
            "latency": lat,
            "startup": start,
        }
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
