"""A full disk never costs a forwarded byte: the log stops whole, says so once, and is marked.

Each test runs on two real faults: a small tmpfs filled to the room the test wants
(ENOSPC; needs root to mount, else skipped), and a file-size limit on the proxy's process
(RLIMIT_FSIZE: writes past it fail with EFBIG; Python ignores SIGXFSZ).
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import pytest

from stretto.logs.episode import read_episode
from stretto.logs.sessionlog import SessionLog, read_session_log
from stretto.stdio_client import StdioClient, result_text
from tests.conftest import demo_server, echo_server, proxy
from tests.smalldisk import SmallDisk
from tests.smalldisk import tmpfs as tmpfs  # noqa: F401 - the fixture, shared

PAGE = 4096
TRUNCATED = "stretto/log_truncated"


@pytest.fixture(params=["tmpfs", "fsize"])
def disk(request, tmp_path: Path) -> SmallDisk:
    if request.param == "tmpfs":
        return SmallDisk("tmpfs", request.getfixturevalue("tmpfs"))
    return SmallDisk("fsize", tmp_path)


def ping(n: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"n":"%08d"}}\n' % (n, n)


def whole_log(folder: Path) -> SessionLog:
    """The only log in `folder`, which must end with a whole line (no torn one)."""
    (path,) = folder.glob("*.jsonl")
    assert path.read_bytes().endswith(b"\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn last line would warn
        return read_session_log(path)


def said_once(stderr: str) -> None:
    assert stderr.count("cannot write the session log") == 1, stderr


def wire_lines(log: SessionLog, sender: str) -> list[bytes]:
    return [
        json.dumps(line.message, separators=(",", ":")).encode() + b"\n"
        for line in log.lines
        if line.sender == sender
    ]


def marks(log: SessionLog) -> list[dict]:
    return [
        line.message
        for line in log.lines
        if line.sender == "proxy" and (line.message or {}).get("method") == TRUNCATED
    ]


def test_host_to_server_every_request_is_forwarded_when_the_log_fills(disk: SmallDisk) -> None:
    disk.leave_room(8 * PAGE)
    sent = b"".join(ping(n) for n in range(3000))
    done = subprocess.run(
        disk.command(proxy("--record", str(disk.logs), server=echo_server())),
        input=sent,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == sent  # all 3,000, byte for byte
    said_once(done.stderr.decode())
    log = whole_log(disk.logs)
    # What was logged is a prefix of the session, each line whole, in order.
    assert 100 < len(log.lines) < 6000
    for sender in ("client", "server"):
        logged = wire_lines(log, sender)
        assert logged == [ping(n) for n in range(len(logged))]


def test_server_to_host_every_answer_arrives_when_the_log_fills(disk: SmallDisk) -> None:
    disk.leave_room(16 * PAGE)
    command = disk.command(proxy("--record", str(disk.logs), server=demo_server()))
    with StdioClient(command) as client:
        client.initialize()
        answers = [client.call_tool("big", {"size": 20_000}) for _ in range(20)]
        assert client.close() == 0  # the server lived to the end
    assert [len(result_text(a)) for a in answers] == [20_000] * 20
    said_once(client.stderr_text)
    episode = read_episode(next(disk.logs.glob("*.jsonl")))
    assert 0 < len(episode.results()) < 20


def test_a_line_too_big_for_the_room_left_ends_the_log_with_a_mark(disk: SmallDisk) -> None:
    disk.leave_room(4 * PAGE)
    big = b'{"jsonrpc":"2.0","method":"notifications/big","params":{"p":"%s"}}\n' % (b"y" * 40_000)
    command = disk.command(proxy("--record", str(disk.logs), server=echo_server()))
    with StdioClient(command) as client:
        for line in (ping(1), big, ping(2), ping(3)):
            client.send_line(line)
            assert client.read_line(10) == line
        assert client.close() == 0
    said_once(client.stderr_text)
    log = whole_log(disk.logs)
    assert wire_lines(log, "client") == [ping(1)] and wire_lines(log, "server") == [ping(1)]
    (mark,) = marks(log)
    assert log.lines[-1].message == mark  # nothing is logged after the mark
    assert mark["params"]["since_t_ms"] >= log.lines[-2].t_ms
    assert mark["params"]["reason"]
    assert read_episode(log.path).calls() == []  # readers take the mark in their stride


def test_a_log_whose_header_cannot_be_written_is_not_left_and_forwarding_goes_on(
    disk: SmallDisk,
) -> None:
    disk.leave_room(0)
    sent = ping(1) + ping(2)
    done = subprocess.run(
        disk.command(proxy("--record", str(disk.logs), server=echo_server())),
        input=sent,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == sent
    said_once(done.stderr.decode())
    assert "recording to" not in done.stderr.decode()
    assert list(disk.logs.glob("*")) == []


def test_when_space_comes_back_the_log_is_marked_and_has_no_torn_line(tmpfs: Path) -> None:
    disk = SmallDisk("tmpfs", tmpfs)
    disk.leave_room(2 * PAGE)
    with StdioClient(proxy("--record", str(disk.logs), server=echo_server())) as client:
        n = 0
        while "cannot write the session log" not in client.stderr_text:
            n += 1
            client.send_line(ping(n))
            assert client.read_line(10) == ping(n)
        disk.free()
        client.send_line(ping(n + 1))  # the next line's turn to log writes the mark
        assert client.read_line(10) == ping(n + 1)
        assert client.close() == 0
    said_once(client.stderr_text)
    log = whole_log(disk.logs)
    (mark,) = marks(log)
    assert log.lines[-1].message == mark
    assert "No space left on device" in mark["params"]["reason"]
    logged = wire_lines(log, "client")
    assert logged == [ping(i) for i in range(1, len(logged) + 1)] and len(logged) <= n
