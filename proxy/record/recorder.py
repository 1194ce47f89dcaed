"""The session log writer (session-log format version 2, docs/formats.md).

Every wire line becomes one log line. A line that parses as JSON is embedded verbatim (its
own bytes, never re-serialized); any other line is kept as `raw` text.

Lines are written in batches on an O_APPEND file, whole lines only: a batch goes out when it
holds FLUSH_BYTES, when its oldest line is FLUSH_S old (the relay's loop asks, `flush_due`),
and when the session ends — so forwarding pays a `write` per batch, not per line, and never
an fsync. A crash of the server loses nothing (the proxy lives on and writes the rest); only
a crash of the proxy itself can lose its last FLUSH_S of lines, never tear one.

Forwarding never depends on the log. When a write fails (a full disk, a quota, a file-size
limit, an I/O error) the file is cut back to the last whole line that made it, the proxy says
so once, and the log stops there: it holds a whole prefix of the session, ended — as soon as
there is room for it — by a `stretto/log_truncated` mark.
"""

from __future__ import annotations

import _thread
import os
import sys
import time

from proxy.cjson import dumps_compact, dumps_string, loads_strict
from proxy.wire import IOV_MAX, drop_written
from stretto.vocabulary import LOG_VERSION

TRUNCATED_METHOD = "stretto/log_truncated"
FLUSH_BYTES = 1 << 16  # a batch this big is written at once
FLUSH_S = 0.05  # a line waits at most this long to be written (while the proxy runs)
SMALL = 1 << 12  # an entry below this is joined into one piece; a bigger one is written as is


Parsed = tuple[object, "bytes | memoryview"] | None  # what parse_json_line gives


def parse_json_line(line: bytes) -> Parsed:
    """(parsed value, the line's JSON text) if the line is one strict JSON value, else None.

    The text is the line without its line ending (a view of it: a 16 MB line is not copied
    for the log); it is what the log embeds as `message`.
    """
    end = len(line)
    while end and line[end - 1] in b"\r\n":
        end -= 1
    text = memoryview(line)[:end] if end != len(line) else line
    try:
        value = loads_strict(str(text, "utf-8"))
    except (UnicodeDecodeError, ValueError, StopIteration):  # any depth parses (cjson)
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


def host_session_id() -> str:
    """The host session this proxy runs in: `STRETTO_SESSION` when the host (or a wrapper)
    sets it, else `host-<parent pid>` — the host process that started every server's proxy;
    learning merges only logs that also overlap in time, so a reused pid does not join two
    host sessions."""
    return os.environ.get("STRETTO_SESSION") or f"host-{os.getppid()}"


def make_private_dir(path: str) -> list[str]:
    """Create `path` (and parents) with mode 0700; the folders created, outermost first."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.exists(p):
        missing.append(p)
        p = os.path.dirname(p)
    created = []
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
            created.append(folder)
        except FileExistsError:
            pass
    return created


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
        host_session: str | None = None,
        server_name: str | None = None,
    ) -> None:
        self._created_dirs = make_private_dir(directory)
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
        self._lock = _thread.allocate_lock()
        self._size = 0  # bytes of whole lines in the file
        self._batch: list[bytes | memoryview] = []  # the pieces of the lines not written yet
        self._entries: list[tuple[int, int]] = []  # those lines: (length, t_ms)
        self._batch_bytes = 0
        self._due: float | None = None  # when the batch (or the mark) must be written
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
        # written only when known, so a log without them reads as before
        if host_session is not None:
            header["host_session"] = host_session
        if server_name is not None:
            header["server_name"] = server_name
        failed = self._append([dumps_compact(header).encode() + b"\n"], [])
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

    def _append(self, pieces: list, entries: list[tuple[int, int]]) -> str | None:
        """Write whole lines, or leave the file with the whole lines that made it: None, or
        why not all of them did. `entries` are the lines' (length, t_ms), or [] for one line
        that needs no mark if lost (the header, the mark itself)."""
        written, failed = self._write(pieces)
        if failed is None:
            self._size += written
            return None
        kept = 0  # the whole lines that made it
        for length, stamp in entries:
            if kept + length > written:
                self._since_ms = stamp
                break
            kept += length
        try:
            os.ftruncate(self._fd, self._size + kept)  # cut off the torn part; needs no space
        except OSError:
            pass
        self._size += kept
        return failed

    def _write(self, pieces: list) -> tuple[int, str | None]:
        """writev the pieces in order: (bytes written, None or why it stopped)."""
        pieces, written = list(pieces), 0
        try:
            while pieces:
                done = os.writev(self._fd, pieces[:IOV_MAX])
                if done == 0:
                    return written, "the log takes no more bytes"
                written += done
                drop_written(pieces, done)
        except OSError as exc:
            return written, exc.strerror or str(exc)
        return written, None

    def _unlink(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def remove(self) -> None:
        """Take the log away, and the folders made for it (a session refused at its start)."""
        with self._lock:
            self._batch, self._entries, self._batch_bytes = [], [], 0
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._unlink()
            for folder in reversed(self._created_dirs):
                try:
                    os.rmdir(folder)
                except OSError:
                    break

    def record(
        self,
        sender: str,
        line: bytes,
        parsed: Parsed,
        t_ns: int | None = None,
    ) -> None:
        """Log one wire line read from `sender` (client, server, proxy or context), read at
        `t_ns` (time.monotonic_ns(); now if not given)."""
        if self.stopped is not None:
            if not self._marked and self._due is None:
                self._due = time.monotonic()  # try the mark at the next flush
            return
        if parsed is not None:
            field, text = b'","message":', parsed[1]
        else:
            field = b'","raw":'
            text = dumps_string(raw_text(line)).encode("utf-8", errors="surrogatepass")
        with self._lock:
            if self.stopped is not None or self._fd < 0:
                return  # stopped meanwhile, or a line that comes after the session's end
            now = self._ms(t_ns)
            head = b'{"t_ms":%d,"from":"%s%s' % (now, sender.encode(), field)
            if len(text) < SMALL:
                entry = b"".join((head, text, b"}\n"))
                self._batch.append(entry)
                length = len(entry)
            else:
                self._batch += (head, text, b"}\n")
                length = len(head) + len(text) + 2
            self._entries.append((length, now))
            self._batch_bytes += length
            if self._due is None:  # FLUSH_S after the line was read, not after it was logged
                read = time.monotonic() if t_ns is None else t_ns / 1e9
                self._due = read + FLUSH_S
            if self._batch_bytes >= FLUSH_BYTES:
                self._flush()

    def next_due(self) -> float | None:
        """When (time.monotonic()) `flush_due` has work to do; None while nothing waits."""
        return self._due

    def flush_due(self, now: float | None = None) -> None:
        """Write the batch if its time has come (or try the truncation mark again)."""
        due = self._due
        if due is not None and (now if now is not None else time.monotonic()) >= due:
            with self._lock:
                self._flush()

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        """Write what waits (holding the lock)."""
        self._due = None
        if self._fd < 0:
            return
        if self.stopped is not None:
            self._mark()
            return
        if not self._batch:
            return
        batch, entries = self._batch, self._entries
        self._batch, self._entries, self._batch_bytes = [], [], 0
        failed = self._append(batch, entries)
        if failed is None:
            return
        # The first line that did not make it, and everything after it, is lost.
        self.stopped = failed
        _say(
            f"cannot write the session log {self.path}: {failed}; it ends here "
            "(marked truncated when there is room), forwarding goes on"
        )
        self._mark()

    def _ms(self, t_ns: int | None) -> int:
        now = ((t_ns or time.monotonic_ns()) - self._started_ns) // 1_000_000
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
        message = dumps_compact(note).encode()
        line = b'{"t_ms":%d,"from":"proxy","message":' % self._ms(None) + message + b"}\n"
        self._marked = self._append([line], []) is None

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                self._flush()
                self._mark()
                os.close(self._fd)
                self._fd = -1


def _say(text: str) -> None:
    try:
        print(f"stretto-proxy: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # no stderr to say it on
