"""`stretto`: the parser, put together from the command families, and main().

Each family's module declares its commands; a command imports what it needs when it runs, so
`stretto --help` and the light commands start fast."""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys

from stretto import __version__
from stretto.cli import learning, lifecycle, offline, redacting, review, serving, setup, warehouse
from stretto.cli.options import INTERRUPTED, OtherDomain
from stretto.logs.sessionlog import LogError
from stretto.model.flow import FlowError
from stretto.progress import close_all
from stretto.usage import Parser, parse

FAMILIES = (warehouse, learning, redacting, review, offline, lifecycle, serving, setup)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="stretto",
        description="Learn, from an MCP agent's recorded sessions, which reads it is about to "
        "make, and review what was learned. Sessions are recorded by stretto-proxy.",
        epilog="`stretto COMMAND --help` describes a command, with examples. "
        "docs/cli.md describes them all.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"stretto {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for family in FAMILIES:
        family.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    _buffer_stdout()
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, where a closed pipe can still be handled
        return status
    except BrokenPipeError:  # every command's stdout, --help's too
        return _reader_gone()


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parse(parser, sys.argv[1:] if argv is None else argv)
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        try:
            return args.run(args)
        finally:
            close_all()
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback
        print("stretto: interrupted", file=sys.stderr)
        return INTERRUPTED
    except OtherDomain as exc:  # sessions the flow cannot speak for
        print(f"stretto: {exc}", file=sys.stderr)
        return 2
    except (LogError, FlowError) as exc:  # bad input: the message names file, line, field
        print(f"stretto: {exc}", file=sys.stderr)
        return 1


def _buffer_stdout() -> None:
    """With PYTHONUNBUFFERED (or `python -u`) stdout writes straight to its file, and a write
    the pipe takes only part of is not retried: when the reader goes away, the rest is
    dropped without an error and the command ends with 0. Put a buffer between them (flushed
    at every line, as unbuffered output is seen), whose writes are retried and raise
    BrokenPipeError."""
    out = sys.__stdout__
    if out is None or sys.stdout is not out:  # no stdout, or a test's capture
        return
    if isinstance(out.buffer, io.RawIOBase):
        raw = io.FileIO(out.fileno(), "w", closefd=False)  # the wrapper never closes fd 1
        sys.stdout = io.TextIOWrapper(
            io.BufferedWriter(raw),
            encoding=out.encoding,
            errors=out.errors,
            line_buffering=True,
        )


def _reader_gone() -> int:
    """The reader of stdout went away (`stretto sessions DIR | head -2`): stop quietly with
    the status of a process ended by SIGPIPE, as Unix tools do."""
    try:  # what is still buffered cannot be written: send it nowhere, not to a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is no file (e.g. a test's capture)
        pass
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
