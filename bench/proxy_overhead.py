"""What stretto-proxy costs an MCP host, measured against the same work without the proxy, the
two sides alternating in one run so that machine noise falls on both alike (issue 20).

- Start-up: spawn, write one line at once, time until it comes back. The echo server
  (tests/servers/echo_server.py) directly, through `stretto-proxy --record`, and through
  `--record --flow FILE`; `cat` directly and through the proxy (the proxy's own start).
- Per call: `tools/call` round trips to the demo server (tests/servers/demo_server.py, the mcp
  SDK over stdio): directly, through `--record`, and through `--record --flow F --flow-shadow`
  (F learned at the start from sessions recorded here: after a lookup the agent looks up what
  it found, so every call gets a real decision with a binding). One call to each in turn, the
  order rotated; each timed from writing the request to reading the answer.
- Throughput: N small messages written as fast as the pipe takes them and read back, `cat`
  directly and through `--record -- cat`: messages per second each way.
- A 16 MiB JSON line (one big tool result) through `cat`, directly and through the proxy.
- `--upstream`: the demo server over Streamable HTTP (JSON answers) against a direct client
  (http.client, one kept-alive connection): start-up (a fresh client process vs a fresh
  proxy, each posting `initialize`), per call, a pipelined burst, a 16 MiB result.
- `--listen` is measured by bench/listen.py (64 sessions at once): its row says so.

The goals of issue 20 are printed with each figure and whether it is met; start-up goals count
double when the machine is loaded: other processes kept at least half a CPU busy on average
during the run (the machine's busy time less the run's own). The proxy's bytecode is compiled
first, as an installed package has it. Nothing is asserted. `--json FILE` also writes the
figures.

    .venv/bin/python bench/proxy_overhead.py [--calls 5000] [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sides import (  # noqa: E402
    HTTP_CLIENT,
    INITIALIZE,
    HttpClient,
    Peer,
    alternate,
    first_line_ms,
    loadavg,
    percentile,
)

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
DEMO = [PYTHON, str(ROOT / "tests" / "servers" / "demo_server.py")]
ECHO = [PYTHON, str(ROOT / "tests" / "servers" / "echo_server.py")]
CAT = [shutil.which("cat") or "cat"]
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'

GOALS = {
    "startup_ms": 25.0,  # added over the same server started directly, recording on
    "startup_flow_ms": 30.0,  # the same with --flow
    "loaded_factor": 2.0,  # start-up goals when the machine is loaded
    "p50_ms": 0.1,  # added per tools/call, recording
    "p99_ms": 0.5,
    "shadow_p50_ms": 0.15,  # added per call with a flow in shadow mode
    "messages_per_s": 20_000.0,  # each way, recording on
    "big_ratio": 2.0,  # a 16 MiB line: proxied time / direct time
}
LOADED_CPUS = 0.5  # others kept this much CPU busy on average: the machine counts as loaded


PROXY: list[str] = []  # --proxy: another build to measure (e.g. an older checkout's)
COMPARE: list[str] = []  # --compare: another build, measured beside this one as a side more


def proxy_command() -> list[str]:
    if PROXY:
        return PROXY
    beside = Path(PYTHON).parent / "stretto-proxy"
    return [str(beside)] if beside.exists() else [PYTHON, "-m", "proxy"]


# start-up -----------------------------------------------------------------------------------


def startup(reps: int, tmp: Path, flow: Path) -> dict:
    proxy, record = proxy_command(), ["--record", str(tmp / "startup")]
    cases = {
        "echo": ECHO,
        "echo_record": [*proxy, *record, "--", *ECHO],
        "echo_flow": [*proxy, *record, "--flow", str(flow), "--", *ECHO],
        "cat": CAT,
        "cat_proxied": [*proxy, "--", *CAT],
    }
    if COMPARE:
        cases["echo_record_compared"] = [*COMPARE, *record, "--", *ECHO]
        cases["echo_flow_compared"] = [*COMPARE, *record, "--flow", str(flow), "--", *ECHO]
        cases["cat_compared"] = [*COMPARE, "--", *CAT]
    samples = alternate(
        {name: (lambda c=c: first_line_ms(c, PING, PING)) for name, c in cases.items()}, reps
    )
    out: dict = {name: _summary(values) for name, values in samples.items()}
    out["added_record_ms"] = out["echo_record"]["median"] - out["echo"]["median"]
    out["added_flow_ms"] = out["echo_flow"]["median"] - out["echo"]["median"]
    out["added_cat_ms"] = out["cat_proxied"]["median"] - out["cat"]["median"]
    return out


# per call -----------------------------------------------------------------------------------


def learn_demo_flow(tmp: Path) -> Path:
    """A flow for the demo server, learned from sessions recorded here."""
    logs = tmp / "learn-logs"
    for session in range(4):
        peer = Peer([*proxy_command(), "--record", str(logs), "--", *DEMO])
        peer.initialize()
        peer.request("tools/list", {})
        for i in range(12):
            found = peer.call("lookup", {"key": f"s{session}-{i}"})
            value = json.loads(found["result"]["content"][0]["text"])["found"]
            peer.call("lookup", {"key": value})
        peer.close()
    out = tmp / "demo.flow.json"
    stretto = str(Path(PYTHON).parent / "stretto")
    done = subprocess.run(
        [stretto, "learn", "--sessions", str(logs), "--domain", "demo", "--habit-only"]
        + ["--out", str(out), "--home", str(tmp / "home")],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"stretto learn failed: {done.stderr}")
    return out


def per_call(calls: int, warmup: int, tmp: Path, flow: Path) -> dict:
    proxy = proxy_command()
    peers = {
        "direct": Peer(DEMO),
        "record": Peer([*proxy, "--record", str(tmp / "calls"), "--", *DEMO]),
        "shadow": Peer(
            [*proxy, "--record", str(tmp / "shadow"), "--flow", str(flow), "--flow-shadow"]
            + ["--", *DEMO]
        ),
    }
    if COMPARE:
        peers["record_compared"] = Peer([*COMPARE, "--record", str(tmp / "calls2"), "--", *DEMO])
    try:
        for peer in peers.values():
            peer.initialize()
            peer.request("tools/list", {})
            for i in range(warmup):
                peer.timed_call(f"warm{i}")
        cpu = {name: peer.cpu_s() for name, peer in peers.items()}
        samples = alternate(
            {name: (lambda p=p: p.timed_call("k") / 1e6) for name, p in peers.items()},
            calls,
            quiet_gc=True,
        )
        cpu = {name: (peer.cpu_s() - cpu[name]) / calls * 1e6 for name, peer in peers.items()}
    finally:
        for peer in peers.values():
            peer.close()
    decisions = sum(
        1
        for path in (tmp / "shadow").glob("*.flow.jsonl")
        for line in path.open()
        if "action" in line
    )
    out: dict = {name: _summary(values) for name, values in samples.items()}
    for name in ("record", "shadow", "record_compared")[: 3 if COMPARE else 2]:
        diffs = [p - d for p, d in zip(samples[name], samples["direct"], strict=True)]
        out[f"{name}_added"] = {
            "p50": out[name]["p50"] - out["direct"]["p50"],
            "p99": out[name]["p99"] - out["direct"]["p99"],
            "pair_median": statistics.median(diffs),
        }
    out["shadow_decisions"] = decisions
    out["cpu_us_per_call"] = cpu  # the server's own (direct), the proxy's own (the others)
    return out


# throughput and a big line ------------------------------------------------------------------


def notification(n: int) -> bytes:
    return (
        b'{"jsonrpc":"2.0","method":"notifications/progress",'
        b'"params":{"progressToken":"bench","progress":%d,"total":1000000}}\n' % n
    )


def throughput(messages: int, reps: int, tmp: Path) -> dict:
    data = b"".join(notification(n) for n in range(messages))
    proxied = [*proxy_command(), "--record", str(tmp / "burst"), "--", *CAT]

    def burst(command: list[str]) -> float:
        peer = Peer(command)
        try:
            return peer.stream(data, messages)
        finally:
            peer.close()

    samples = alternate({"direct": lambda: burst(CAT), "record": lambda: burst(proxied)}, reps)
    out: dict = {name: _summary(values) for name, values in samples.items()}
    for name in ("direct", "record"):
        out[f"{name}_per_s"] = messages / (out[name]["median"] / 1000)
    out["messages"] = messages
    return out


def big_line(size: int, reps: int, tmp: Path) -> dict:
    line = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"%s"}]}}\n' % (
        b"y" * size
    )
    peers = {
        "direct": Peer(CAT),
        "record": Peer([*proxy_command(), "--record", str(tmp / "big"), "--", *CAT]),
    }
    logged, copies = tmp / "big", [0]

    def settled(peer: Peer) -> None:
        """Until the proxy has logged both copies of the line (it does so once they have
        passed): its work on one line is not timed with the next."""
        if peer is peers["direct"]:
            return
        copies[0] += 2
        deadline = time.monotonic() + 120
        while sum(p.stat().st_size for p in logged.glob("*.jsonl")) < copies[0] * len(line):
            if time.monotonic() > deadline:
                raise SystemExit("the proxy did not log the 16 MiB line")
            time.sleep(0.005)

    try:
        for peer in peers.values():
            peer.stream(line, 1)  # warm up (and the proxy's log file)
            settled(peer)

        def one(peer: Peer) -> float:
            elapsed = peer.stream(line, 1)
            settled(peer)
            return elapsed

        samples = alternate({name: (lambda p=p: one(p)) for name, p in peers.items()}, reps)
    finally:
        for peer in peers.values():
            peer.close()
    out: dict = {name: _summary(values) for name, values in samples.items()}
    out["ratio"] = out["record"]["median"] / out["direct"]["median"]
    out["bytes"] = len(line)
    return out


# --upstream ---------------------------------------------------------------------------------


def _start_http_server(tmp: Path) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [*DEMO, "--http", str(port), "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return server, port
        time.sleep(0.05)
    server.kill()
    raise SystemExit("the demo server over HTTP did not start")


def upstream(tmp: Path, calls: int, warmup: int, reps: int, startup_reps: int) -> dict:
    server, port = _start_http_server(tmp)
    url = f"http://127.0.0.1:{port}/mcp"
    proxied_command = [*proxy_command(), "--record", str(tmp / "http"), "--upstream", url]
    out: dict = {}
    try:
        client = [PYTHON, "-c", HTTP_CLIENT, str(port)]
        start = alternate(
            {
                "direct": lambda: first_line_ms(client, INITIALIZE, b'"result"'),
                "proxied": lambda: first_line_ms(proxied_command, INITIALIZE, b'"result"'),
            },
            startup_reps,
        )
        out["startup"] = {name: _summary(values) for name, values in start.items()}
        out["startup_added_ms"] = (
            out["startup"]["proxied"]["median"] - out["startup"]["direct"]["median"]
        )

        direct, proxied = HttpClient(port), Peer(proxied_command)
        compared = Peer([*COMPARE, *proxied_command[len(proxy_command()) :]]) if COMPARE else None
        try:
            sides = {
                "direct": lambda: direct.timed_call("k"),
                "proxied": lambda: proxied.timed_call("k") / 1e6,
            }
            for peer in (proxied, compared):
                if peer is not None:
                    peer.initialize()
            if compared is not None:
                sides["compared"] = lambda: compared.timed_call("k") / 1e6
            for _ in range(warmup):
                for side in sides.values():
                    side()
            samples = alternate(sides, calls, quiet_gc=True)
            out.update({name: _summary(values) for name, values in samples.items()})
            out["added"] = {q: out["proxied"][q] - out["direct"][q] for q in ("p50", "p99")}
            if compared is not None:
                out["compared_added"] = {
                    q: out["compared"][q] - out["direct"][q] for q in ("p50", "p99")
                }

            burst = 500
            pings = b"".join(
                b'{"jsonrpc":"2.0","id":"b%d","method":"ping"}\n' % i for i in range(burst)
            )

            def direct_burst() -> float:
                started = time.perf_counter_ns()
                for i in range(burst):
                    direct.post(b'{"jsonrpc":"2.0","id":"b%d","method":"ping"}' % i)
                return (time.perf_counter_ns() - started) / 1e6

            burst_sides = {
                "direct": direct_burst,
                "proxied": lambda: proxied.stream(pings, burst),
            }
            if compared is not None:
                burst_sides["compared"] = lambda: compared.stream(pings, burst)
            bursts = alternate(burst_sides, reps)  # ms per burst, the median of each side
            per_s = {name: burst / (statistics.median(ms) / 1000) for name, ms in bursts.items()}
            out["burst_messages"] = burst
            out["burst_direct_per_s"] = per_s["direct"]
            out["burst_proxied_per_s"] = per_s["proxied"]
            if compared is not None:
                out["burst_compared_per_s"] = per_s["compared"]
            out["burst_ratio"] = out["burst_proxied_per_s"] / out["burst_direct_per_s"]

            size = 16 * 2**20
            big_call: dict = {"jsonrpc": "2.0", "id": "big", "method": "tools/call"}
            big_call["params"] = {"name": "big", "arguments": {"size": size}}
            body = json.dumps(big_call).encode()

            def timed_post() -> float:
                started = time.perf_counter_ns()
                direct.post(body)
                return (time.perf_counter_ns() - started) / 1e6

            big_sides = {"direct": timed_post, "proxied": lambda: proxied.stream(body + b"\n", 1)}
            if compared is not None:
                big_sides["compared"] = lambda: compared.stream(body + b"\n", 1)
            big = alternate(big_sides, reps)
            out["big"] = {name: _summary(values) for name, values in big.items()}
            out["big_ratio"] = out["big"]["proxied"]["median"] / out["big"]["direct"]["median"]
        finally:
            proxied.close()
            if compared is not None:
                compared.close()
            direct.conn.close()
    finally:
        server.terminate()
        server.wait(30)
    return out


# report -------------------------------------------------------------------------------------


def _summary(values: list[float]) -> dict:
    return {
        "median": statistics.median(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "min": min(values),
        "n": len(values),
    }


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _goal(goal: str, value: float, op: str, limit: float, unit: str, fmt: str, note=""):
    """One row of the goals table: (goal, limit, measured, met)."""
    ok = {"<=": value <= limit, ">=": value >= limit, "<": value < limit}[op]
    return goal, f"{op} {limit:,g}{unit}{note}", f"{value:{fmt}}{unit}", ok


def goals_table(f: dict) -> list[tuple[str, str, str, bool | None]]:
    loaded = f["load"]["loaded"]
    factor, note = (GOALS["loaded_factor"], " (loaded: x2)") if loaded else (1.0, "")
    start, start_flow = GOALS["startup_ms"] * factor, GOALS["startup_flow_ms"] * factor
    p50, p99, shadow = GOALS["p50_ms"], GOALS["p99_ms"], GOALS["shadow_p50_ms"]
    rate, big = GOALS["messages_per_s"], GOALS["big_ratio"]
    ms, ms1, x, rate_fmt = (" ms", "+.3f"), (" ms", "+.1f"), ("x", ".2f"), ("/s", ",.0f")
    rows = []
    if "startup" in f:  # not with --only-http
        s, c, t, b = f["startup"], f["per_call"], f["throughput"], f["big"]
        rows += [
            _goal("start-up added, recording", s["added_record_ms"], "<=", start, *ms1, note),
            _goal("start-up added, --flow", s["added_flow_ms"], "<=", start_flow, *ms1, note),
            _goal("per call p50 added, recording", c["record_added"]["p50"], "<=", p50, *ms),
            _goal("per call p99 added, recording", c["record_added"]["p99"], "<=", p99, *ms),
            _goal("per call p50 added, --flow-shadow", c["shadow_added"]["p50"], "<=", shadow, *ms),
            _goal("small messages each way, recording", t["record_per_s"], ">=", rate, *rate_fmt),
            _goal("16 MiB line, proxied / cat", b["ratio"], "<", big, *x),
        ]
    h = f.get("http")
    if h:
        rows += [
            _goal("--upstream: start-up added", h["startup_added_ms"], "<=", start, " ms", "+.1f"),
            _goal("--upstream: per call p50 added", h["added"]["p50"], "<=", p50, *ms),
            _goal("--upstream: per call p99 added", h["added"]["p99"], "<=", p99, *ms),
            _goal("--upstream: a burst, proxied / direct", h["burst_ratio"], ">=", 1.0, *x),
            _goal("--upstream: 16 MiB result, proxied / direct", h["big_ratio"], "<", big, *x),
        ]
    rows.append(("--listen (issue 17)", "64 sessions at once", "bench/listen.py", None))
    return rows


def report(f: dict) -> str:
    load = f["load"]
    lines = [
        f"stretto-proxy overhead: {f['machine']}",
        f"other processes kept {load['others_cpus']:.2f} of {os.cpu_count()} CPUs busy during "
        f"the run (load average before it: {load['loadavg_before']:.2f}) -> "
        f"{'loaded' if load['loaded'] else 'not loaded'}",
    ]
    if "startup" in f:  # not with --only-http
        lines += _stdio_report(f)
    h = f.get("http")
    if h:
        lines += _http_report(h)
    lines += ["", f"{'goal (issue 20)':<48}{'limit':<28}{'measured':<16}"]
    for goal, limit, measured, ok in goals_table(f):
        lines.append(f"{goal:<48}{limit:<28}{measured:<16}{'' if ok is None else _verdict(ok)}")
    return "\n".join(lines)


def _stdio_report(f: dict) -> list[str]:
    s, c, t, b = f["startup"], f["per_call"], f["throughput"], f["big"]
    lines = ["", f"Start-up to the first line back, median of {s['echo']['n']} (ms):"]
    for name, label in (
        ("echo", "echo server"),
        ("echo_record", "  through --record"),
        ("echo_record_compared", "  through --record, compared"),
        ("echo_flow", "  through --record --flow"),
        ("echo_flow_compared", "  through --record --flow, compared"),
        ("cat", "cat"),
        ("cat_proxied", "  through the proxy"),
        ("cat_compared", "  through the compared proxy"),
    ):
        if name not in s:
            continue
        row = s[name]
        lines.append(
            f"  {label:<36}{row['median']:>8.1f}  (min {row['min']:.1f}, p90 {row['p90']:.1f})"
        )
    lines += ["", f"Per tools/call, demo server, {c['direct']['n']} calls each (ms):"]
    lines.append(f"  {'':<36}{'p50':>8}{'p90':>8}{'p99':>8}")
    for name, label in (
        ("direct", "direct"),
        ("record", "--record"),
        ("record_compared", "--record, compared"),
        ("shadow", "--flow-shadow"),
    ):
        if name not in c:
            continue
        row = c[name]
        lines.append(f"  {label:<36}{row['p50']:>8.3f}{row['p90']:>8.3f}{row['p99']:>8.3f}")
    cpu = c["cpu_us_per_call"]
    lines += [
        f"  median of per-pair differences: record {c['record_added']['pair_median']:+.3f}, "
        f"shadow {c['shadow_added']['pair_median']:+.3f}; shadow decisions logged: "
        f"{c['shadow_decisions']}",
        f"  CPU per call (us): the server {cpu['direct']:.0f}; the proxy, recording "
        f"{cpu['record']:.0f}, in shadow {cpu['shadow']:.0f} (its decisions included)",
    ]
    if "record_compared" in c:
        lines.append(
            f"  compared: per-pair difference {c['record_compared_added']['pair_median']:+.3f}, "
            f"CPU per call {cpu['record_compared']:.0f} us"
        )
    lines += [
        "",
        f"Throughput, {t['messages']:,} messages each way: cat {t['direct_per_s']:,.0f}/s, "
        f"through --record {t['record_per_s']:,.0f}/s",
        f"A {b['bytes'] / 2**20:.0f} MiB line: cat {b['direct']['median']:.1f} ms, through "
        f"--record {b['record']['median']:.1f} ms ({b['ratio']:.2f}x)",
    ]
    return lines


def _http_report(h: dict) -> list[str]:
    start, big = h["startup"], h["big"]
    lines = [
        "",
        "--upstream (Streamable HTTP, JSON answers), direct client / proxy:",
        f"  start-up {start['direct']['median']:.1f} / {start['proxied']['median']:.1f} ms; "
        f"per call p50 {h['direct']['p50']:.3f} / {h['proxied']['p50']:.3f} ms, "
        f"p99 {h['direct']['p99']:.3f} / {h['proxied']['p99']:.3f} ms",
        f"  a burst of {h['burst_messages']} pings {h['burst_direct_per_s']:,.0f} / "
        f"{h['burst_proxied_per_s']:,.0f} per s; a 16 MiB result "
        f"{big['direct']['median']:.0f} / {big['proxied']['median']:.0f} ms",
    ]
    if "compared" in h:
        lines.append(
            f"  compared: per call p50 {h['compared']['p50']:.3f} ms (added "
            f"{h['compared_added']['p50']:+.3f}, p99 {h['compared_added']['p99']:+.3f}); "
            f"burst {h['burst_compared_per_s']:,.0f} per s; 16 MiB "
            f"{big['compared']['median']:.0f} ms"
        )
    return lines


class OthersCpu:
    """The CPUs other processes kept busy (on average) from now: the machine's busy time
    (/proc/stat, the hypervisor's steal included) less this run's own (this process and the
    children it waited for). The load average cannot tell: it counts the bench itself."""

    def __init__(self) -> None:
        self.start = (time.monotonic(), self._busy_s(), self._own_s())

    @staticmethod
    def _busy_s() -> float:
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        except OSError:
            return float("nan")
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own_s() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def cpus(self) -> float:
        wall, busy, own = self.start
        return ((self._busy_s() - busy) - (self._own_s() - own)) / (time.monotonic() - wall)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for row in Path("/proc/cpuinfo").read_text().splitlines():
            if row.startswith("model name"):
                cpu = row.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000, help="timed calls per side (5000)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls per side (200)")
    parser.add_argument("--startup-reps", type=int, default=30, metavar="N")
    parser.add_argument("--messages", type=int, default=100_000, help="throughput burst size")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--no-http", action="store_true", help="skip the --upstream part")
    parser.add_argument("--only-http", action="store_true", help="just the --upstream part")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--proxy", metavar="COMMAND", help="measure this proxy command instead")
    parser.add_argument(
        "--compare", metavar="COMMAND", help="also measure this proxy command, alternating"
    )
    args = parser.parse_args(argv)
    if args.proxy:
        PROXY[:] = args.proxy.split()
    if args.compare:
        COMPARE[:] = args.compare.split()
    if args.quick:
        args.calls, args.warmup, args.startup_reps, args.messages = 500, 50, 6, 20_000
    for package in ("proxy", "stretto"):
        compileall.compile_dir(str(ROOT / package), quiet=1)
    before = loadavg()  # others' only: nothing of ours runs yet
    others = OthersCpu()
    figures: dict = {"machine": machine(), "goals": GOALS}
    with tempfile.TemporaryDirectory(prefix="stretto-bench-") as name:
        tmp = Path(name)
        # Every side starts there: `python -m proxy` puts its working directory first on the
        # path, so a --compare build run from this checkout would import this checkout's proxy.
        os.chdir(tmp)
        reps = 3 if args.quick else 5
        if not args.only_http:
            flow = learn_demo_flow(tmp)
            figures["startup"] = startup(args.startup_reps, tmp, flow)
            figures["per_call"] = per_call(args.calls, args.warmup, tmp, flow)
            figures["throughput"] = throughput(args.messages, reps, tmp)
            figures["big"] = big_line(16 * 2**20, reps, tmp)
        if not args.no_http:
            figures["http"] = upstream(
                tmp, max(200, args.calls // 5), args.warmup, reps, args.startup_reps
            )
    used = others.cpus()
    figures["load"] = {
        "loadavg_before": before,
        "others_cpus": used,
        "loaded": used >= LOADED_CPUS,
    }
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
