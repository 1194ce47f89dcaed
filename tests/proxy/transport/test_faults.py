"""Faults: the server crashing or exiting, the host leaving, the proxy failing to start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from stretto.logs.episode import read_episode
from stretto.logs.sessionlog import read_session_log
from stretto.stdio_client import StdioClient
from tests.builders import wait_until
from tests.conftest import PYTHON, SERVERS, demo_server, echo_server, proxy

CRASH = [PYTHON, str(SERVERS / "crash_server.py")]


def request(request_id: int, text: str) -> bytes:
    return (
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "lookup", "arguments": {"key": text}},
            }
        ).encode()
        + b"\n"
    )


def answers(client: StdioClient, count: int) -> list[dict]:
    return [json.loads(client.read_line(10)) for _ in range(count)]


def test_server_crash_answers_every_waiting_request(logs: Path) -> None:
    with StdioClient(proxy("--record", str(logs), server=CRASH)) as client:
        client.send_line(request(1, "hold"))
        client.send_line(request(2, "hold"))
        client.send_line(request(3, "fine"))
        assert json.loads(client.read_line(10))["id"] == 3  # echoed: not a response, still waiting
        client.send_line(request(4, "crash"))
        got = answers(client, 4)
        assert client.read_line(10) is None
        status = client.proc.wait(10)
    assert status == 3
    assert sorted(a["id"] for a in got) == [1, 2, 3, 4]
    for answer in got:
        assert answer["error"]["message"].startswith(
            "stretto-proxy: the MCP server exited (status 3)"
        )
    assert "the server exited with status 3; answered 4 waiting request(s)" in client.stderr_text
    (log_path,) = logs.glob("*.jsonl")
    log = read_session_log(log_path)  # complete and parseable
    proxy_lines = [line for line in log.lines if line.sender == "proxy"]
    assert len(proxy_lines) == 4
    assert all("error" in line.message for line in proxy_lines)


def test_server_killed_by_a_signal(logs: Path) -> None:
    with StdioClient(proxy("--record", str(logs), server=CRASH)) as client:
        client.send_line(request(7, "die"))
        (answer,) = answers(client, 1)
        assert answer["id"] == 7 and "error" in answer
        assert client.proc.wait(10) == 128 + 9
    (log_path,) = logs.glob("*.jsonl")
    episode = read_episode(log_path)
    (result,) = episode.results().values()
    assert result.error and "exited (status 137)" in result.content


def test_host_closing_stdin_ends_the_server_and_keeps_its_status(logs: Path) -> None:
    with StdioClient(proxy("--record", str(logs), server=demo_server())) as client:
        client.initialize()
        assert client.close() == 0
    (log_path,) = logs.glob("*.jsonl")
    assert len(read_session_log(log_path).lines) == 3


@pytest.mark.slow  # waits out the shutdown grace, then SIGTERM's
def test_a_server_that_ignores_eof_is_ended(logs: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        proxy("--record", str(logs), server=[*CRASH, "--ignore-eof"]),
        input=request(1, "fine"),
        capture_output=True,
        timeout=60,
    )
    # closed stdin, waited, SIGTERM (ignored), waited, SIGKILL
    assert done.returncode == 128 + 9
    assert time.monotonic() - started < 30
    (log_path,) = logs.glob("*.jsonl")
    assert [line.sender for line in read_session_log(log_path).lines] == ["client", "server"]


# Reads its input to the end, then keeps the CPU busy for 3 s (a shutdown that takes its time),
# then exits with status 7.
SLOW_TO_EXIT = [
    PYTHON,
    "-c",
    "import sys, time\n"
    "for line in sys.stdin.buffer: sys.stdout.buffer.write(line); sys.stdout.flush()\n"
    "end = time.monotonic() + 3\n"
    "while time.monotonic() < end: pass\n"
    "sys.exit(7)",
]


@pytest.mark.slow  # a server busy for 3 s past the host's leaving
def test_a_server_still_working_on_its_exit_is_waited_for(logs: Path) -> None:
    """Past the 2 s grace, a server using the CPU is let finish (up to 10 s); one that sits
    idle is ended (the test above)."""
    done = subprocess.run(
        proxy("--record", str(logs), server=SLOW_TO_EXIT),
        input=request(1, "fine"),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 7, done.stderr
    assert done.stdout == request(1, "fine")


def test_a_server_that_cannot_start_leaves_no_log(logs: Path) -> None:
    done = subprocess.run(
        proxy("--record", str(logs), server=["/no/such/server"]), capture_output=True, timeout=30
    )
    assert done.returncode == 125
    assert b"stretto-proxy: cannot start the server `/no/such/server`" in done.stderr
    assert not logs.exists() or not list(logs.iterdir())


def test_a_log_folder_that_cannot_be_made_fails_clearly(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    done = subprocess.run(
        proxy("--record", str(blocker / "logs"), server=echo_server()),
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 125
    assert b"cannot create the session log" in done.stderr


def test_usage_errors_exit_2() -> None:
    for argv in (proxy(server=[])[:-1], [*proxy(server=["x"])[:1], "--bogus", "--", "x"]):
        done = subprocess.run(argv, capture_output=True, timeout=30)
        assert done.returncode == 2, argv
        assert b"usage: stretto-proxy" in done.stderr


def test_sigterm_to_the_proxy_stops_the_server(logs: Path) -> None:
    with StdioClient(proxy("--record", str(logs), server=demo_server())) as client:
        client.initialize()
        client.proc.terminate()
        status = client.proc.wait(20)
    assert status in (0, 128 + 15)
    assert "stopping on signal 15" in client.stderr_text
    (log_path,) = logs.glob("*.jsonl")
    read_session_log(log_path)


def process_state(pid: int) -> str | None:
    """The process's state letter (R, S, Z, ...), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def gone(pid: int) -> bool:
    """Whether the process ends (or is left a zombie): waited for, failing after 30 s."""
    return wait_until(lambda: process_state(pid) in (None, "Z", "X"), f"pid {pid} to end", 30)


def grandchild_under_sh(tmp_path: Path, then: str = "true") -> tuple[list[str], Path]:
    """`sh -c 'python stubborn_server.py PIDFILE; then'`: the server the proxy starts is sh."""
    pid_file = tmp_path / "grandchild.pid"
    stubborn = SERVERS / "stubborn_server.py"
    return ["sh", "-c", f"'{PYTHON}' '{stubborn}' '{pid_file}'; {then}"], pid_file


def end_for_sure(pid_file: Path) -> None:
    if pid_file.exists() and process_state(int(pid_file.read_text())) not in (None, "Z"):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


@pytest.mark.slow  # waits out the shutdown grace
def test_the_servers_whole_process_group_is_ended_when_the_host_leaves(
    tmp_path: Path, logs: Path
) -> None:
    server, pid_file = grandchild_under_sh(tmp_path)
    try:
        with StdioClient(proxy("--record", str(logs), server=server)) as client:
            client.send_line(request(1, "fine"))
            assert json.loads(client.read_line(10))["id"] == 1
            # stdin closed: sh waits for its child, which ignores EOF and SIGTERM
            assert client.close(30) == 128 + 15  # sh ended by SIGTERM
        assert gone(int(pid_file.read_text()))
    finally:
        end_for_sure(pid_file)


def test_the_servers_whole_process_group_is_ended_on_sigterm(tmp_path: Path, logs: Path) -> None:
    server, pid_file = grandchild_under_sh(tmp_path)
    try:
        with StdioClient(proxy("--record", str(logs), server=server)) as client:
            client.send_line(request(1, "fine"))
            assert json.loads(client.read_line(10))["id"] == 1
            client.proc.terminate()
            status = client.proc.wait(30)
            assert client.stderr_closed.wait(30)  # the proxy's last words are in stderr_text
            assert status == 128 + 15, client.stderr_text
        assert "stopping on signal 15" in client.stderr_text
        assert gone(int(pid_file.read_text()))
    finally:
        end_for_sure(pid_file)


def test_the_server_hears_sigterm_even_when_the_proxys_starter_ignored_it(
    tmp_path: Path, logs: Path
) -> None:
    """An ignored signal stays ignored across exec: a shell the proxy starts would inherit an
    ignored SIGTERM (from a supervisor, say) and outlive the group's SIGTERM."""
    server, pid_file = grandchild_under_sh(tmp_path)
    command = proxy("--record", str(logs), server=server)
    ignoring = [
        PYTHON,
        "-c",
        "import os, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "os.execv(sys.argv[1], sys.argv[1:])",
        *command,
    ]
    try:
        with StdioClient(ignoring) as client:
            client.send_line(request(1, "fine"))
            assert json.loads(client.read_line(10))["id"] == 1
            client.proc.terminate()
            status = client.proc.wait(30)
            assert client.stderr_closed.wait(30)  # stderr_text is whole
            assert status == 128 + 15, client.stderr_text  # sh ended by SIGTERM, not SIGKILL
        assert "SIGKILL" not in client.stderr_text
        assert gone(int(pid_file.read_text()))
    finally:
        end_for_sure(pid_file)


@pytest.mark.slow  # waits out the shutdown grace
def test_what_a_server_leaves_running_when_it_exits_is_ended(tmp_path: Path, logs: Path) -> None:
    """sh exits 3 at once; its background child keeps the server's stdout open."""
    pid_file = tmp_path / "grandchild.pid"
    stubborn = SERVERS / "stubborn_server.py"
    server = ["sh", "-c", f"'{PYTHON}' '{stubborn}' '{pid_file}' <&0 & sleep 1; exit 3"]
    try:
        with StdioClient(proxy("--record", str(logs), server=server)) as client:
            client.send_line(request(1, "fine"))
            assert json.loads(client.read_line(10))["id"] == 1
            assert client.proc.wait(30) == 3
        assert gone(int(pid_file.read_text()))
    finally:
        end_for_sure(pid_file)


def test_a_server_that_closes_its_output_but_keeps_running(logs: Path) -> None:
    with StdioClient(
        proxy("--record", str(logs), server=[PYTHON, str(SERVERS / "mute_server.py")])
    ) as client:
        client.send_line(request(1, "fine"))
        assert json.loads(client.read_line(10))["id"] == 1  # echoed: still waiting
        client.send_line(request(2, "mute"))
        got = answers(client, 2)
        assert client.read_line(10) is None
        assert client.proc.wait(30) == 0  # its stdin closed, it ended by itself
    assert sorted(a["id"] for a in got) == [1, 2]
    for answer in got:
        assert answer["error"]["message"] == "stretto-proxy: the MCP server closed its output"
    assert "the server closed its output but kept running" in client.stderr_text
    (log_path,) = logs.glob("*.jsonl")
    proxy_lines = [line for line in read_session_log(log_path).lines if line.sender == "proxy"]
    assert len(proxy_lines) == 2


BRITTLE = [PYTHON, str(SERVERS / "brittle_server.py")]
TEAR = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tear","arguments":{}}}\n'


def test_a_server_dying_mid_line_leaves_the_sdk_host_a_valid_error(logs: Path) -> None:
    """The server writes half its answer and dies: the official client (stdio_client) gets
    the proxy's JSON-RPC error for its call, not the torn line glued to it (a ValidationError
    that loses the error, then "Connection closed")."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.shared.exceptions import MCPError

    command = proxy("--record", str(logs), server=BRITTLE)

    async def call() -> str:
        # this environment (the SDK passes on only a few variables by default): this tree's proxy
        params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
        with open(os.devnull, "w") as quiet:
            async with (
                stdio_client(params, errlog=quiet) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                with pytest.raises(MCPError) as raised:
                    await session.call_tool("tear", {})
                return str(raised.value)

    message = anyio.run(call)
    assert message.startswith("stretto-proxy: the MCP server exited (status 3) before answering")
    (log_path,) = logs.glob("*.jsonl")
    log = read_session_log(log_path)
    torn = [line for line in log.lines if line.sender == "server" and line.raw is not None]
    assert [line.raw for line in torn] == ['{"jsonrpc":"2.0","id":2,"result":{"content":']


@pytest.mark.parametrize("serving", [False, True], ids=["forwarding", "serving-a-flow"])
def test_a_torn_last_line_is_ended_before_the_proxys_error(
    logs: Path, hand_made_shop_flow: Path, serving: bool
) -> None:
    """The host gets the torn bytes as they came, ended by a newline, then the error on a
    line of its own (with a flow the server's lines are held until whole: the same)."""
    flow = ["--flow", str(hand_made_shop_flow)] if serving else []
    with StdioClient(proxy("--record", str(logs), *flow, server=BRITTLE)) as client:
        client.send_line(TEAR)
        got = list(iter(lambda: client.read_line(10), None))
        assert client.proc.wait(10) == 3
    assert len(got) == 2, got
    torn, error = got
    assert torn == b'{"jsonrpc":"2.0","id":2,"result":{"content":\n'
    answer = json.loads(error)
    assert answer["id"] == 2 and "exited (status 3)" in answer["error"]["message"]


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (zombies, ended already, are not)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


def watchdogs_of(pgid: int) -> list[int]:
    """The proxy's watchdogs of group `pgid` still running."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"stretto-proxy-watchdog" in argv and str(pgid).encode() in argv:
                found.append(int(entry.name))
    return found


def server_with_background_children(tmp_path: Path) -> tuple[list[str], Path]:
    """A shell script server that starts two children in the background and waits on them
    (writing its pid, its group's id, first)."""
    pid_file = tmp_path / "server.pid"
    script = f"echo $$ > '{pid_file}'; sleep 300 & sleep 300 & wait"
    return ["sh", "-c", script], pid_file


@pytest.mark.slow  # the watchdog's SIGTERM, then the group's end, polled
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_proxys_server_is_ended_with_all_its_children(tmp_path: Path, logs: Path) -> None:
    """kill -9 of the proxy: its server, a shell script with children in the background,
    does not live on under PID 1; the watchdog ends the server's whole process group."""
    server, pid_file = server_with_background_children(tmp_path)
    proc = subprocess.Popen(
        proxy("--record", str(logs), server=server),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    pgid = 0
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", "the server")
        pgid = int(pid_file.read_text())
        wait_until(lambda: len(group_members(pgid)) == 3, "sh and its two children")
        proc.kill()  # SIGKILL: the proxy has no say
        proc.wait(30)
        wait_until(lambda: not group_members(pgid), "the server's group to end")
        _, err = proc.communicate(timeout=30)
        assert b"the proxy has gone; its watchdog ends the server's process group" in err
        wait_until(lambda: not watchdogs_of(pgid), "the watchdog to exit")
    finally:
        if pgid and group_members(pgid):
            os.killpg(pgid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_proxy_that_ends_its_server_itself_lets_its_watchdog_go(
    tmp_path: Path, logs: Path
) -> None:
    """The proxy ends as it should: the watchdog exits at its word ("done") and is reaped by
    the proxy; it never signals a group the proxy has ended (its id may be someone else's)."""
    pid_file = tmp_path / "server.pid"
    server = ["sh", "-c", f"echo $$ > '{pid_file}'; exec '{PYTHON}' '{SERVERS / 'echo_server.py'}'"]
    with StdioClient(proxy("--record", str(logs), server=server)) as client:
        client.send_line(request(1, "fine"))
        assert json.loads(client.read_line(10))["id"] == 1
        pgid = int(pid_file.read_text())
        assert len(watchdogs_of(pgid)) == 1
        assert client.close(30) == 0
    assert watchdogs_of(pgid) == []
    assert "watchdog" not in client.stderr_text
