"""`--context FILE`: the conversation, one JSON line per message, appended by the host.

Read incrementally and only in whole lines, so a line the host is still writing waits for
the next poll.
"""

from __future__ import annotations

import os
import sys


class ContextFeed:
    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[bytes]:
        """The lines appended since the last poll (each with its newline)."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self._offset:
                    print(
                        f"stretto-proxy: {self.path} shrank; reading the context from its start",
                        file=sys.stderr,
                    )
                    self._offset = 0
                    self._partial = b""
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            print(f"stretto-proxy: cannot read the context {self.path}: {exc}", file=sys.stderr)
            return []
        self._offset += len(data)
        data = self._partial + data
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        return [line + b"\n" for line in data[:cut].split(b"\n")[:-1] if line.strip()]
