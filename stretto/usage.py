"""argparse's usage errors, said better: an option the command does not take is named, under
the usage of the command it was given to, with the nearest option it does take (`unknown
option --sesions (did you mean --sessions?)`); other errors keep argparse's message. Exit 2.
`stretto` and `stretto-console` parse with `Parser` and call `usage_error`."""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import NoReturn


class UsageError(Exception):
    """argparse's error, raised rather than printed, so that it can be said better."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class Parser(argparse.ArgumentParser):
    """A parser whose errors are raised (UsageError); its subcommands' parsers are too."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parser.parse_args(argv)`, with its usage errors said by `usage_error`."""
    try:
        return parser.parse_args(argv)
    except UsageError as exc:
        usage_error(parser, argv, exc)


def usage_error(parser: argparse.ArgumentParser, argv: list[str], exc: UsageError) -> NoReturn:
    """Say a usage error against the command it is in, and exit 2: an option the command
    does not take (a misspelt one named as such, with the nearest it takes), else argparse's
    message."""
    commands = subcommands(parser)
    name = next((a for a in argv if a in commands), None)
    command = commands[name] if name is not None else parser
    rest = argv[argv.index(name) + 1 :] if name is not None else argv
    unknown = unknown_option(command, rest)
    if unknown is not None:
        known = [o for o in command._option_string_actions if o.startswith("--")]
        near = difflib.get_close_matches(unknown, known, n=1)
        hint = f" (did you mean {near[0]}?)" if near else f" (`{command.prog} --help` lists them)"
        command.print_usage(sys.stderr)
        command.exit(2, f"{command.prog}: error: unknown option {unknown}{hint}\n")
    exc.parser.print_usage(sys.stderr)
    exc.parser.exit(2, f"{exc.parser.prog}: error: {exc.message}\n")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def unknown_option(command: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The first `--option` in `argv` (up to a `--`) that `command` does not take, whole or
    as the start of one (argparse takes those, or says they are ambiguous)."""
    known = [o for o in command._option_string_actions if o.startswith("--")]
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("--"):
            continue
        option = arg.split("=", 1)[0]
        if not any(o.startswith(option) for o in known):
            return option
    return None
