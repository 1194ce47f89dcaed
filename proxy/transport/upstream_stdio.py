"""The wrapped MCP server as a child process speaking newline-delimited JSON-RPC on stdio.

Started with `os.posix_spawnp` rather than `subprocess`: the host waits for the proxy before
its first message, and `subprocess` alone costs more start-up than the rest of the proxy.
Nothing here starts a thread (but where there is no pidfd to learn of the server's exit).

The server runs in a process group of its own, and is signalled as a group: a server
started through `sh -c` or `npx`, or one that starts helpers, is ended whole.

Even when the proxy is killed (SIGKILL, the OOM killer): a watchdog, a small `sh` in a group
of its own, holds the read end of a pipe only the proxy writes to. When the proxy ends the
server itself, it tells the watchdog so ("done") and the watchdog exits; when the pipe ends
without that, the proxy has died, and the watchdog ends the server's group as the proxy would
have (SIGTERM, then SIGKILL if anything is left 2 s later). PR_SET_PDEATHSIG would not do: it
reaches only the group's leader (a shell), not the children it started in the background.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # `signal` without its enums (~4 ms of imports)
import _thread
import os
import time

# `sh -c WATCHDOG stretto-proxy-watchdog PGID TRIES`: reads its stdin (the proxy's pipe); at
# its end without "done", SIGTERM to group PGID, then SIGKILL once TRIES looks 50 ms apart
# still find it. (dash's kill wants `-s SIG -- -PGID`.)
WATCHDOG = """read -r said
[ "$said" = done ] && exit 0
kill -s TERM -- "-$1" 2>/dev/null || exit 0
echo "stretto-proxy: the proxy has gone; its watchdog ends the server's process group $1" >&2
tries=0
while kill -s 0 -- "-$1" 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt "$2" ]; then kill -s KILL -- "-$1" 2>/dev/null; exit 0; fi
    sleep 0.05
done
"""
WATCHDOG_TRIES = 40  # 2 s, as the proxy's own shutdown grace


class StartError(Exception):
    """The server could not be started."""


def exit_status(wait_status: int) -> int:
    """A shell-style status: the exit code, or 128 + n when killed by signal n."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


class StdioServer:
    """Starts the server; its stderr is the proxy's stderr, untouched.

    The proxy's loop (proxy.transport.pump) moves the bytes: it writes to `stdin_fd` (non-blocking),
    reads `stdout_fd`, and learns that the server has exited when `exit_fd` is readable.
    """

    def __init__(self, command: list[str], env: dict[str, str] | None = None) -> None:
        server_in, self.stdin_fd = os.pipe()
        self.stdout_fd, server_out = os.pipe()
        try:
            self.pid = os.posix_spawnp(
                command[0],
                command,
                {**os.environ, **env} if env else os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, server_in, 0),
                    (os.POSIX_SPAWN_DUP2, server_out, 1),
                ],
                # Python ignores SIGPIPE; the server should not inherit that. Nor an ignored
                # SIGTERM, or a mask blocking it, from whatever started the proxy: the proxy
                # ends the server's group with SIGTERM, which a shell that inherited it
                # ignored never hears (killed 4 s later: 137 instead of 143).
                setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGTERM),
                setsigmask=(),
                setpgroup=0,  # its own group, led by itself: pgid == pid
            )
        except OSError as exc:
            os.close(self.stdin_fd)
            os.close(self.stdout_fd)
            raise StartError(
                f"cannot start the server `{command[0]}`: {exc.strerror or exc}"
            ) from exc
        finally:
            os.close(server_in)  # the child's ends: it has its own copies now
            os.close(server_out)
        os.set_blocking(self.stdin_fd, False)  # our end only: the loop never waits on it
        self._watchdog: tuple[int, int] | None = _start_watchdog(self.pid)  # (pid, pipe)
        self.status: int | None = None
        self._terminated_at: float | None = None  # when the group was sent SIGTERM
        self._reaped: list[int] = []
        try:
            self.exit_fd = os.pidfd_open(self.pid)  # readable once the server has exited
            self._waiter = False
        except (AttributeError, OSError):  # not Linux 5.3+: a thread waits instead
            self.exit_fd, done_w = os.pipe()
            self._waiter = True
            _thread.start_new_thread(self._wait_on_thread, (done_w,))

    def _wait_on_thread(self, done_w: int) -> None:
        self._reaped.append(os.waitpid(self.pid, 0)[1])
        os.write(done_w, b"x")
        os.close(done_w)

    def reap(self) -> int:
        """The exit status: at once when `exit_fd` is readable, else once the server exits."""
        if self.status is None:
            if self._waiter:
                os.read(self.exit_fd, 1)
                wait_status = self._reaped[0]
            else:
                wait_status = os.waitpid(self.pid, 0)[1]
            self.status = exit_status(wait_status)
            os.close(self.exit_fd)
        return self.status

    def terminate(self) -> None:
        """SIGTERM to the server's whole process group."""
        if self._terminated_at is None:
            self._terminated_at = time.monotonic()
        self._signal(_signal.SIGTERM)

    def kill(self) -> None:
        self._signal(_signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is empty (or, its leader long gone, the id someone else's)

    def end_group(self, grace: float) -> None:
        """Once the server has exited: end what is left of its process group — SIGTERM, then
        SIGKILL if anything is still there `grace` seconds after the first SIGTERM. The
        watchdog is let go: the group is the proxy's to end from here on."""
        if self.status is None:
            return
        try:
            if not self._group_alive():
                return
            self.terminate()
            deadline = (self._terminated_at or time.monotonic()) + grace
            while time.monotonic() < deadline:
                time.sleep(0.02)
                if not self._group_alive():
                    return
            self.kill()
        finally:
            self.release_watchdog()

    def release_watchdog(self) -> None:
        """Tell the watchdog the proxy has ended the server itself; wait for it to exit."""
        if self._watchdog is None:
            return
        pid, pipe = self._watchdog
        self._watchdog = None
        try:
            os.write(pipe, b"done\n")
        except OSError:
            pass  # it has gone already
        os.close(pipe)
        try:
            os.waitpid(pid, 0)  # it exits at once on "done"
        except ChildProcessError:
            pass

    def progress(self) -> tuple[bool, int] | None:
        """Whether the server is running or waiting for a CPU, and the CPU ticks it has used
        (None without /proc): a server on its way out shows one or the other moving, one that
        ignores its closed input sits asleep."""
        fields = _stat_fields(str(self.pid))
        if fields is None:
            return None
        return fields[0] == b"R", int(fields[11]) + int(fields[12])  # utime + stime

    def _group_alive(self) -> bool:
        """Whether a process of the group still runs (zombies waiting to be reaped don't)."""
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return _has_live_member(self.pid)


def _start_watchdog(pgid: int) -> tuple[int, int] | None:
    """Start the watchdog of the server's group `pgid`: (its pid, the pipe's write end), or
    None (said on stderr) when it cannot start."""
    read_end, write_end = os.pipe()  # not inheritable: the server never holds it open
    try:
        pid = os.posix_spawn(
            "/bin/sh",
            ["/bin/sh", "-c", WATCHDOG, "stretto-proxy-watchdog", str(pgid), str(WATCHDOG_TRIES)],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, read_end, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),  # not the host's pipe
            ],
            setsigdef=(_signal.SIGPIPE, _signal.SIGTERM),
            setsigmask=(),
            setpgroup=0,  # a group of its own: neither the proxy's group nor the server's
        )
    except OSError as exc:
        os.close(write_end)
        os.write(
            2,
            b"stretto-proxy: cannot start the server's watchdog (%s); if the proxy is killed, "
            b"the server may outlive it\n" % str(exc.strerror or exc).encode(),
        )
        return None
    finally:
        os.close(read_end)
    return pid, write_end


def _has_live_member(pgid: int) -> bool:
    """Whether /proc shows a process of group `pgid` that is not a zombie (True without /proc)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)  # None: gone meanwhile
        if fields and len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _stat_fields(pid: str) -> list[bytes] | None:
    """/proc/PID/stat from its third field on (state, ppid, pgrp, ...), or None when the
    process is gone. "pid (comm) state ...": comm may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()
