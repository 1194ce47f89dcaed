"""A minimal MCP host over stdio: starts a command (usually stretto-proxy wrapping a server)
and speaks newline-delimited JSON-RPC to it. The scripted agent of the walkthrough, the
benchmarks and the tests drive real servers with it; it needs no SDK and no LLM."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from stretto.vocabulary import PROTOCOL_VERSION


class ClientError(RuntimeError):
    pass


class StdioClient:
    def __init__(
        self,
        command: list[str],
        *,
        context_file: Path | None = None,
        env: dict[str, str] | None = None,
        stderr: Any = subprocess.PIPE,
        client_name: str = "stretto-scripted-agent",
    ) -> None:
        self.command = command
        self.context_file = context_file
        self.client_name = client_name
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env
        )
        # Both are pipes (opened with PIPE just above), never None.
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin: IO[bytes] = self.proc.stdin
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._next_id = 1
        self.stderr_text = ""
        # Set once every writer has closed the command's stderr: stderr_text is then whole.
        self.stderr_closed = threading.Event()
        threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True).start()
        if self.proc.stderr is not None:  # stderr=PIPE: kept in stderr_text
            threading.Thread(
                target=self._pump_stderr, args=(self.proc.stderr,), daemon=True
            ).start()

    def _pump(self, stdout: IO[bytes]) -> None:
        for line in iter(stdout.readline, b""):
            self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self, stderr: IO[bytes]) -> None:
        try:
            for line in iter(stderr.readline, b""):
                self.stderr_text += line.decode("utf-8", "replace")
        finally:
            self.stderr_closed.set()

    # raw lines -----------------------------------------------------------------------------

    def send_line(self, line: bytes) -> None:
        self._stdin.write(line)
        self._stdin.flush()

    def read_line(self, timeout: float = 30.0) -> bytes | None:
        """The next line from the server (None at end of stream)."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise ClientError(f"no answer within {timeout} s from {self.command[0]}") from None

    # JSON-RPC ------------------------------------------------------------------------------

    def notify(self, method: str, params: dict | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send_line(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: dict | None = None, timeout: float = 30.0) -> dict:
        """Send a request and wait for its response (other messages meanwhile are dropped)."""
        request_id = self._next_id
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send_line(json.dumps(message).encode() + b"\n")
        deadline = time.monotonic() + timeout
        while True:
            line = self.read_line(max(0.01, deadline - time.monotonic()))
            if line is None:
                raise ClientError(f"{self.command[0]} closed its output before answering {method}")
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(answer, dict)
                and answer.get("id") == request_id
                and "method" not in answer
            ):
                return answer

    def initialize(self) -> dict:
        answer = self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": self.client_name, "version": "1"},
            },
        )
        self.notify("notifications/initialized")
        return answer

    def list_tools(self) -> list[dict]:
        return self.request("tools/list", {})["result"]["tools"]

    def call_tool(self, name: str, arguments: dict | None = None, timeout: float = 30.0) -> dict:
        """The `tools/call` response (its `result`, or `error`)."""
        return self.request("tools/call", {"name": name, "arguments": arguments or {}}, timeout)

    def say(self, role: str, content: str) -> None:
        """Append a conversation message to the context file the proxy reads."""
        if self.context_file is None:
            raise ClientError("this client has no context file")
        with open(self.context_file, "a", encoding="utf-8") as f:
            f.write(json.dumps({"role": role, "content": content}, ensure_ascii=False) + "\n")

    def close(self, timeout: float = 10.0) -> int:
        """Close our end and wait for the command to exit; its exit status."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise ClientError(f"{self.command[0]} did not exit within {timeout} s") from None

    def __enter__(self) -> StdioClient:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            try:
                self.close()
            except ClientError:
                pass


def result_text(answer: dict) -> str:
    """The text items of a tools/call answer, joined; the error message for an error."""
    if "error" in answer:
        return str(answer["error"].get("message", answer["error"]))
    content = answer.get("result", {}).get("content", [])
    return "\n".join(item.get("text", "") for item in content if item.get("type") == "text")
