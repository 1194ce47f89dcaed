"""Server-Sent Events: `changed` when a log or flow is added, removed or written, `job` as a
job runs, and a `: ping` comment every 15 s so proxies and browsers keep the stream open."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator

PING_S = 15.0
END = "end"  # not an event sent: ends the stream
WATCH_S = 2.0  # how often the data directory is looked at while someone listens


class Events:
    def __init__(self, signature=None, ping_s: float = PING_S, watch_s: float = WATCH_S) -> None:
        self.signature = signature  # () -> a value that changes when logs or flows change
        self.ping_s, self.watch_s = ping_s, watch_s
        self.lock = threading.Lock()
        self.listeners: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = []
        self.watcher: threading.Thread | None = None
        self.stopped = threading.Event()

    def publish(self, event: str, data: dict) -> None:
        """Send an event to every listener (from any thread)."""
        with self.lock:
            listeners = list(self.listeners)
        for loop, queue in listeners:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (event, data))
            except RuntimeError:  # its loop has closed
                pass

    def _watch(self) -> None:
        last = self.signature()
        while not self.stopped.wait(self.watch_s):
            with self.lock:
                if not self.listeners:
                    continue
            now = self.signature()
            if now != last:
                last = now
                self.publish("changed", {"what": "logs or flows"})

    def stop(self) -> None:
        """Stop watching and end every stream (a server shutting down waits for them)."""
        self.stopped.set()
        self.publish(END, {})

    async def stream(self) -> AsyncIterator[bytes]:
        """One listener's stream, in the text/event-stream format."""
        queue: asyncio.Queue = asyncio.Queue()
        entry = (asyncio.get_running_loop(), queue)
        with self.lock:
            self.listeners.append(entry)
            if self.signature is not None and self.watcher is None:
                self.watcher = threading.Thread(target=self._watch, daemon=True, name="watch")
                self.watcher.start()
        try:
            yield b"retry: 3000\n\n"
            while True:
                try:
                    event, data = await asyncio.wait_for(queue.get(), self.ping_s)
                except TimeoutError:
                    yield b": ping\n\n"
                    continue
                if event == END:
                    return
                body = json.dumps(data, ensure_ascii=False)
                yield f"event: {event}\ndata: {body}\n\n".encode()
        finally:
            with self.lock:
                self.listeners.remove(entry)
