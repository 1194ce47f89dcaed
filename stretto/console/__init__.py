"""stretto-console: a local web app over the data directory (docs/console.md).

`main` is the `stretto-console` entry point; `doctor.can_start()` tells `stretto doctor`
whether the console can start here."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    # entry point: `stretto doctor` imports stretto.console.doctor without the command
    from stretto.console.cli import main as run

    code = run(argv)
    if argv is None:
        sys.exit(code)
    return code
