"""The console on a real uvicorn server: Server-Sent Events, 50 concurrent readers while an
ingest runs, a large session paged and streamed, the command line (healthcheck, usage), and
`stretto doctor`'s rows for it."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2 as httpx
import pytest

from stretto.console.cli import main
from stretto.console.doctor import can_start, checks
from stretto.console.state import Options
from tests.builders import answers_to, slow_connections, wait_until, with_descriptors
from tests.conftest import PYTHON, ROOT, free_port
from tests.stretto.console.conftest import AUTH, TOKEN, WRITE, client_for, served


def _listen(base: str, lines: queue.Queue, stop: threading.Event) -> None:
    with httpx.Client(timeout=None) as client:
        with client.stream("GET", f"{base}/api/events", headers=AUTH) as answer:
            lines.put(("status", answer.status_code, answer.headers["content-type"]))
            for line in answer.iter_lines():
                lines.put(("line", line))
                if stop.is_set():
                    return


def _wait_for(lines: queue.Queue, wanted: str) -> list:
    seen = []
    while True:
        item = lines.get()
        seen.append(item)
        if item[0] == "line" and item[1].startswith(wanted):
            return seen


def test_events_send_changes_jobs_and_pings(home: Path):
    with served(Options(data=home, token=TOKEN, ping_s=0.3)) as (base, _):
        lines: queue.Queue = queue.Queue()
        stop = threading.Event()
        threading.Thread(target=_listen, args=(base, lines, stop), daemon=True).start()
        assert lines.get() == ("status", 200, "text/event-stream; charset=utf-8")
        _wait_for(lines, ": ping")
        httpx.put(f"{base}/api/settings", headers=WRITE, json={"threshold": 0.4})
        seen = _wait_for(lines, "event: changed")
        _, data = _wait_for(lines, "data: ")[-1]
        assert json.loads(data[6:]) == {"what": "settings"}, seen
        job = httpx.post(f"{base}/api/jobs", headers=WRITE, json={"kind": "doctor"}).json()
        while True:
            _wait_for(lines, "event: job")
            _, data = _wait_for(lines, "data: ")[-1]
            event = json.loads(data[6:])
            assert event["id"] == job["id"]
            if event["state"] != "running":
                break
        assert event["state"] in ("succeeded", "failed") and "check" in event["output_tail"]
        (home / "logs" / "shop" / "new.jsonl").write_text(
            (home / "logs/retail/20260928T020401.312Z-14780.jsonl").read_text()
        )
        _wait_for(lines, "event: changed")  # the watcher saw the new log
        stop.set()


@pytest.mark.slow  # fifty readers racing an ingest
def test_fifty_readers_while_an_ingest_runs(home: Path):
    paths = ["/api/overview", "/api/sessions", "/api/flows", "/api/meta"]
    paths += [
        "/api/sessions/20260928T020401.117Z-14662/timeline",
        "/api/flows/flows/shop.flow.json",
    ]
    with served(Options(data=home, token=TOKEN)) as (base, _):
        with httpx.Client() as client:
            job = client.post(f"{base}/api/jobs", headers=WRITE, json={"kind": "ingest"}).json()

            def read(n: int) -> tuple[int, str, str]:
                with httpx.Client(timeout=None) as mine:
                    answer = mine.get(base + paths[n % len(paths)], headers=AUTH)
                    state = mine.get(f"{base}/api/jobs/{job['id']}", headers=AUTH).json()["state"]
                    return answer.status_code, paths[n % len(paths)], state

            rounds = []
            while True:
                with ThreadPoolExecutor(50) as pool:
                    results = list(pool.map(read, range(50)))
                rounds.append(results)
                assert all(status == 200 for status, _, _ in results), results
                if all(state != "running" for _, _, state in results):
                    break
            assert any(state == "running" for _, _, state in rounds[0])  # read while it ran
            done = client.get(f"{base}/api/jobs/{job['id']}", headers=AUTH).json()
            assert done["state"] == "succeeded", client.get(
                f"{base}/api/jobs/{job['id']}/output", headers=AUTH
            ).text
            overview = client.get(f"{base}/api/overview", headers=AUTH).json()
            # each session once, from the logs; the 7 under logs/ are all in the warehouse
            assert overview["totals"]["sessions"] == 12
            assert overview["warehouse"]["held"] == 7 and not overview["warehouse"]["stale"]


def _large_session(path: Path, calls: int = 2000, result_chars: int = 20_000) -> None:
    """A recorded session of `calls` agent calls, each answered with ~`result_chars`."""
    tool = {
        "name": "read",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    }
    with path.open("w") as f:
        header = {"stretto_mcp_log": 2, "session": "big", "started_unix_ms": 1790000000000}
        f.write(json.dumps(header | {"server_command": ["big-server"], "domain": "big"}) + "\n")
        listing = {"jsonrpc": "2.0", "id": 0, "result": {"tools": [tool]}}
        f.write(
            json.dumps(
                {
                    "t_ms": 0,
                    "from": "client",
                    "message": {"jsonrpc": "2.0", "id": 0, "method": "tools/list"},
                }
            )
            + "\n"
        )
        f.write(json.dumps({"t_ms": 1, "from": "server", "message": listing}) + "\n")
        body = "x" * result_chars
        for n in range(1, calls + 1):
            call = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": "read", "arguments": {"n": n}},
            }
            answer = {
                "jsonrpc": "2.0",
                "id": n,
                "result": {"content": [{"type": "text", "text": f"{n}:{body}"}]},
            }
            f.write(json.dumps({"t_ms": 1000 * n, "from": "client", "message": call}) + "\n")
            f.write(json.dumps({"t_ms": 1000 * n + 1, "from": "server", "message": answer}) + "\n")


def test_a_large_session_pages_and_streams(tmp_path: Path):
    data = tmp_path / "home"
    (data / "logs" / "big").mkdir(parents=True)
    log = data / "logs" / "big" / "big.jsonl"
    _large_session(log)
    assert log.stat().st_size > 40_000_000
    client = client_for(data)
    summary = client.get("/api/sessions/big", headers=AUTH).json()
    assert summary["calls"] == 2000 and summary["turns"] == 2000
    first = client.get("/api/sessions/big/timeline?limit=100", headers=AUTH).json()
    assert first["total"] == 2000 and len(first["items"]) == 100 and first["next"] == 100
    item = first["items"][0]
    assert item["result"]["cut"] and item["result"]["chars"] == 20_002
    assert len(item["result"]["text"]) == 2000  # a preview; the whole line on request
    line = client.get("/api/sessions/big/timeline?offset=1999&limit=100", headers=AUTH).json()
    assert line["next"] is None and line["items"][0]["id"] == "2000"
    whole = client.get(f"/api/sessions/big/raw?from={item['result_line']}&lines=1", headers=AUTH)
    assert json.loads(whole.content)["message"]["result"]["content"][0]["text"].startswith("1:xxx")
    with client.stream("GET", "/api/sessions/big/raw", headers=AUTH) as answer:
        sizes = [len(chunk) for chunk in answer.iter_raw()]
    assert sum(sizes) == log.stat().st_size and len(sizes) > 100 and max(sizes) <= 1 << 16


def test_healthcheck_and_usage_errors(home: Path, capsys):
    with served(Options(data=home, token=TOKEN)) as (base, _):
        assert main(["healthcheck", "--listen", base.removeprefix("http://")]) == 0
    assert main(["healthcheck", "--listen", f"127.0.0.1:{free_port()}"]) == 1
    assert "nothing answers" in capsys.readouterr().err
    assert main(["--listen", "nowhere", "--data", str(home)]) == 2
    assert "--listen 'nowhere': expected HOST:PORT" in capsys.readouterr().err
    assert main(["--no-auth", "--listen", "0.0.0.0:7878", "--data", str(home)]) == 2
    assert "--no-auth: only on a loopback address" in capsys.readouterr().err


@pytest.mark.slow
def test_slow_connections_neither_starve_the_console_nor_stay(tmp_path: Path):
    """Issue 40, 4 (slowloris), as for the proxy: 1,100 connections that never finish their
    request line, from 127.0.0.1, against a console allowed 1,024 descriptors; a browser at
    another address is served, one at the attacker's gets a clean 503, and each attacker is
    answered 503 at once or 408 once its headers' 10 s are up."""
    port = free_port()
    console = subprocess.Popen(
        [PYTHON, "-m", "stretto.console", "--data", str(tmp_path / "home")]
        + ["--listen", f"127.0.0.1:{port}", "--token", TOKEN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=with_descriptors(1024),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        while main(["healthcheck", "--listen", f"127.0.0.1:{port}"]) != 0:
            assert console.poll() is None, console.communicate()
        with slow_connections(port, 1100) as attackers:
            elsewhere = httpx.HTTPTransport(local_address="127.0.0.2")
            with httpx.Client(transport=elsewhere, timeout=30) as browser:
                assert browser.get(f"{base}/api/jobs", headers=AUTH).status_code == 200

            def answered() -> httpx.Response | None:
                try:
                    return httpx.get(f"{base}/api/jobs", headers=AUTH, timeout=30)
                except httpx.TransportError:
                    return None

            # dropped while 64 503s are under way (each for 1 s at most)
            answer = wait_until(answered, "an answer", 30, every_s=0.1)
            assert answer.status_code == 503
            assert answer.headers["retry-after"] == "5"
            seen = answers_to(attackers)
        assert seen.get("held") == 0 and sum(seen.values()) == 1100, seen
        assert seen.get("503", 0) > 0 and seen.get("408", 0) > 0, seen
        assert httpx.get(f"{base}/api/jobs", headers=AUTH, timeout=30).status_code == 200
    finally:
        console.terminate()
        console.communicate(timeout=60)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_the_console_says_its_version(flag: str, capsys):
    from stretto import __version__

    with pytest.raises(SystemExit) as done:
        main([flag])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"stretto-console {__version__}\n"


def test_a_misspelt_option_is_named_not_taken_for_a_command(capsys):
    """`--lisen 127.0.0.1:3504` said "invalid choice: '127.0.0.1:3504'" (the address taken
    for a COMMAND): the option is named, with the nearest one."""
    with pytest.raises(SystemExit) as done:
        main(["--lisen", "127.0.0.1:3504"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: stretto-console ")
    assert err.endswith("stretto-console: error: unknown option --lisen (did you mean --listen?)\n")
    with pytest.raises(SystemExit):
        main(["healthcheck", "--lisen", "127.0.0.1:3504"])
    assert (
        "stretto-console healthcheck: error: unknown option --lisen (did you mean --listen?)"
        in (capsys.readouterr().err)
    )


def test_a_port_in_use_is_said_with_another_to_try(tmp_path: Path, capsys):
    """A busy port printed "cannot listen on ADDR (3)" (uvicorn's exit code): it is said, with
    --listen and another port, exit 1, and nothing said to be served there."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code = main(["--listen", f"127.0.0.1:{port}", "--data", str(tmp_path), "--no-auth"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err == (
        f"stretto-console: cannot listen on 127.0.0.1:{port}: the port {port} is in use "
        f"(another console, or another program); give another with --listen "
        f"127.0.0.1:{port + 1}\n"
    )


def test_stretto_doctor_says_whether_the_console_can_start(tmp_path: Path):
    """Its rows come from stretto.console.doctor.checks(); doctor only looks for the
    console's packages (it does not import Starlette or uvicorn: it stays fast)."""
    script = (
        "import sys\n"
        "from stretto.cli.main import main\n"
        f"main(['doctor', '--home', {str(tmp_path / 'home')!r}])\n"
        "print('imported:', sorted({'starlette', 'uvicorn'} & set(sys.modules)))\n"
    )
    done = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert "Traceback" not in done.stderr, done.stderr
    rows = {
        line.split("  ")[0]: line for line in done.stdout.splitlines() if line.startswith("console")
    }
    assert (
        set(rows)
        == {what for what, _, _ in checks()}
        == {
            "console: package starlette",
            "console: package uvicorn",
            "console: pages",
            "console: cytoscape",
            "console: chart.js",
        }
    )
    assert all("  yes  " in row for row in rows.values()), rows
    assert done.stdout.splitlines()[-1] == "imported: []"
    assert can_start() == (True, "stretto-console can start")


def test_sigterm_ends_the_event_streams_and_exits_cleanly(tmp_path: Path):
    """Issue 43, 1: with a browser's event stream open, SIGTERM ends the stream and the
    console exits without waiting out uvicorn's graceful timeout (it would then cancel the
    stream with `Cancel 1 running task(s)` and tracebacks)."""
    port = free_port()
    console = subprocess.Popen(
        [PYTHON, "-m", "stretto.console", "--data", str(tmp_path / "home")]
        + ["--listen", f"127.0.0.1:{port}", "--token", TOKEN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        while main(["healthcheck", "--listen", f"127.0.0.1:{port}"]) != 0:
            assert console.poll() is None, console.communicate()
        lines: queue.Queue = queue.Queue()
        listener = threading.Thread(
            target=_listen, args=(base, lines, threading.Event()), daemon=True
        )
        listener.start()
        _wait_for(lines, "retry:")  # the stream is open
        console.terminate()
        _, err = console.communicate(timeout=60)
        listener.join(timeout=60)
        assert not listener.is_alive()  # the stream ended: the server closed it
    finally:
        if console.poll() is None:
            console.kill()
            console.communicate()
    # uvicorn ends by raising the signal it caught again, as a process killed by it would
    assert console.returncode in (0, -signal.SIGTERM), err
    assert "graceful shutdown exceeded" not in err and "Traceback" not in err, err
    assert "CancelledError" not in err, err
