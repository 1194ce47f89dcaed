"""The session log writer (session-log format version 2, docs/formats.md).

Every wire line becomes one log line, written with a single `os.write` on an O_APPEND file
so that a crash can tear at most the last line. A line that parses as JSON is embedded
verbatim (its own bytes, never re-serialized); any other line is kept as `raw` text.

Forwarding never depends on the log. When a write fails (a full disk, a quota, a file-size
limit, an I/O error) the part of the line that made it is cut off again, the proxy says so
once, and the log stops there: it holds a whole prefix of the session, ended — as soon as
there is room for it — by a `stretto/log_truncated` mark.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

LOG_VERSION = 2
TRUNCATED_METHOD = "stretto/log_truncated"


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def parse_json_line(line: bytes) -> tuple[object, bytes] | None:
    """(parsed value, the line's JSON text) if the line is one strict JSON value, else None.

    The text is the line without its line ending; it is what the log embeds as `message`.
    """
    text = line.rstrip(b"\r\n")
    if not text.strip():
        return None
    try:
        value = json.loads(text.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value, text


def raw_text(line: bytes) -> str:
    return line.rstrip(b"\r\n").decode("utf-8", errors="replace")


def new_session_id(now: float | None = None, pid: int | None = None) -> str:
    """`YYYYMMDDTHHMMSS.mmmZ-<pid>`: the UTC start time and the proxy's pid."""
    now = time.time() if now is None else now
    pid = os.getpid() if pid is None else pid
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return f"{stamp}.{int(now * 1000) % 1000:03d}Z-{pid}"


def make_private_dir(path: str) -> None:
    """Create `path` (and parents) with mode 0700 for the folders we create."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.exists(p):
        missing.append(p)
        p = os.path.dirname(p)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass


class SessionLog:
    """One session's log file. Thread-safe; `t_ms` never decreases down the file.

    Creating the folder or the file may raise OSError (the proxy cannot start recording);
    nothing after that does: a failed write stops the log (`stopped` says why).
    """

    def __init__(
        self,
        directory: str,
        *,
        server_command: list[str],
        domain: str | None,
        agent_model: str | None,
        started: float,
        started_monotonic_ns: int | None = None,
        session: str | None = None,
    ) -> None:
        make_private_dir(directory)
        base = session or new_session_id(started)
        self.session = base
        suffix = 1
        while True:
            path = os.path.join(directory, f"{self.session}.jsonl")
            try:
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
                break
            except FileExistsError:
                suffix += 1
                self.session = f"{base}-{suffix}"
        self.path = path
        self._started_ns = started_monotonic_ns or time.monotonic_ns()
        self._last_ms = 0
        self._lock = threading.Lock()
        self._size = 0  # bytes of whole lines in the file
        self.stopped: str | None = None  # why the log stopped, once a write failed
        self._since_ms = 0
        self._marked = False
        header = {
            "stretto_mcp_log": LOG_VERSION,
            "session": self.session,
            "started_unix_ms": int(started * 1000),
            "server_command": server_command,
            "domain": domain,
            "agent_model": agent_model,
        }
        failed = self._append(
            json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        )
        if failed is not None:
            # No header, no log: leave no empty file behind, and forward all the same.
            self.stopped, self._marked = failed, True
            self._unlink()
            _say(
                f"cannot write the session log {path}: {failed}; no log is kept, forwarding goes on"
            )

    @property
    def kept(self) -> bool:
        """Whether the file exists (its header was written)."""
        return not (self.stopped and self._size == 0)

    def _append(self, data: bytes) -> str | None:
        """Write `data` whole, or leave the file as it was: None, or why it failed."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            try:
                os.ftruncate(self._fd, self._size)  # cut off the torn part; needs no space
            except OSError:
                pass
            return exc.strerror or str(exc)
        self._size += len(data)
        return None

    def _unlink(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def record(self, sender: str, line: bytes, parsed: tuple[object, bytes] | None) -> None:
        """Log one wire line read from `sender` (client, server, proxy or context)."""
        if self.stopped is not None:
            if not self._marked:
                with self._lock:
                    self._mark()
            return
        if parsed is not None:
            body = b'","message":' + parsed[1] + b"}\n"
        else:
            text = json.dumps(raw_text(line), ensure_ascii=False)
            body = b'","raw":' + text.encode("utf-8", errors="surrogatepass") + b"}\n"
        with self._lock:
            if self.stopped is not None or self._fd < 0:
                return  # stopped meanwhile, or a line that comes after the session's end
            now = self._now_ms()
            failed = self._append(b'{"t_ms":%d,"from":"%s' % (now, sender.encode()) + body)
            if failed is not None:
                self.stopped, self._since_ms = failed, now
                _say(
                    f"cannot write the session log {self.path}: {failed}; it ends here "
                    "(marked truncated when there is room), forwarding goes on"
                )
                self._mark()

    def _now_ms(self) -> int:
        now = (time.monotonic_ns() - self._started_ns) // 1_000_000
        if now < self._last_ms:
            now = self._last_ms
        self._last_ms = now
        return now

    def _mark(self) -> None:
        """Try to end the log with the mark that says it is truncated (holding the lock)."""
        if self.stopped is None or self._marked or self._fd < 0:
            return
        note = {
            "jsonrpc": "2.0",
            "method": TRUNCATED_METHOD,
            "params": {"reason": self.stopped, "since_t_ms": self._since_ms},
        }
        message = json.dumps(note, ensure_ascii=False, separators=(",", ":")).encode()
        line = b'{"t_ms":%d,"from":"proxy","message":' % self._now_ms() + message + b"}\n"
        self._marked = self._append(line) is None

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                self._mark()
                os.close(self._fd)
                self._fd = -1


def _say(text: str) -> None:
    try:
        print(f"stretto-proxy: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # no stderr to say it on
