"""docs/cli.md and the command-line parsers agree both ways, in the style of sqlite-utils' docs
test: every command and option of `stretto` and `stretto-proxy` is documented, and every option
the page names for a command exists.

The page is read by command: `## stretto-proxy` (with its subsections), the `## stretto` intro
(the options of `stretto` itself) and one `### stretto COMMAND` section per command. An option
belongs to the section it is written in, unless it is inside code that starts with another
command (`stretto-proxy --flow-shadow`, `stretto replay --explore 0`); what follows ` -- ` in
code is the wrapped server's command, not ours."""

from __future__ import annotations

import argparse
import re

import pytest

from proxy.options import build_parser as proxy_parser
from stretto.cli.main import build_parser
from tests.conftest import ROOT

CLI_MD = ROOT / "docs" / "cli.md"
LONG_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
CODE = re.compile(r"`([^`]*)`")


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Each command's parser, by the name its section has."""
    return {
        "stretto-proxy": proxy_parser(),
        "stretto": build_parser(),
        **{f"stretto {name}": parser for name, parser in subcommands().items()},
    }


def options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string but help's (a subcommand's own, not those of its subcommands)."""
    return {
        option
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
    }


def sections() -> dict[str, list[str]]:
    """The page's lines by the command whose section holds them (None: no command's)."""
    found: dict[str, list[str]] = {}
    owner: str | None = None
    fenced = False
    for line in CLI_MD.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = re.match(r"(#{2,3}) (.*)", line) if not fenced else None
        if heading:
            level, title = len(heading[1]), heading[2]
            words = title.split()
            if level == 2:
                owner = title if title in ("stretto-proxy", "stretto") else None
            elif owner != "stretto-proxy":  # the proxy's subsections stay the proxy's
                owner = " ".join(words[:2]) if words[0] == "stretto" else None
                line = f"`{title}`"  # a command's heading reads as code
        if owner is not None:
            found.setdefault(owner, []).append(f"`{line}`" if fenced else line)
    return found


def code_owner(code: str, section: str, commands: set[str]) -> str:
    """Whose options a piece of code shows: the command it starts with, else the section's."""
    words = code.replace(".venv/bin/", "").split()
    if words[:1] == ["stretto-proxy"]:
        return "stretto-proxy"
    if words[:1] == ["stretto"] and len(words) > 1:
        return f"stretto {words[1]}" if words[1] in commands else "stretto"
    return section


def named_options() -> dict[str, dict[str, set[str]]]:
    """Per command, the options the page names for it, with the sections naming them."""
    commands = set(subcommands())
    named: dict[str, dict[str, set[str]]] = {}
    for section, lines in sections().items():
        text = "\n".join(lines)
        prose = CODE.sub(" ", text)
        spans = [(section, prose)]
        for code in CODE.findall(text):
            code = re.split(r"(?:^| )--(?: |$)", code)[0]  # not the wrapped server's options
            if code.strip():
                spans.append((code_owner(code, section, commands), code))
        for owner, span in spans:
            for option in LONG_OPTION.findall(span):
                named.setdefault(owner, {}).setdefault(option, set()).add(section)
    return named


def test_every_command_has_a_section_and_every_section_a_command() -> None:
    documented = set(sections())
    assert set(parsers()) - documented == set(), "commands docs/cli.md does not describe"
    assert documented - set(parsers()) == set(), "sections of docs/cli.md for no command"


@pytest.mark.parametrize("command", sorted(parsers()))
def test_every_option_is_documented_in_its_section(command: str) -> None:
    text = "\n".join(sections()[command])
    missing = {o for o in options(parsers()[command]) if not re.search(rf"(?<![\w-]){o}\b", text)}
    assert missing == set(), f"options of `{command}` docs/cli.md does not describe"


@pytest.mark.parametrize("command", sorted(parsers()))
def test_every_option_the_docs_name_exists(command: str) -> None:
    takes = options(parsers()[command]) | {"--help"}
    unknown = {
        f"{option} (in {', '.join(sorted(where))})"
        for option, where in named_options().get(command, {}).items()
        if option not in takes
    }
    assert unknown == set(), f"options docs/cli.md names for `{command}` that it does not take"


def test_every_option_has_help_or_is_self_explaining() -> None:
    """--help lists each option; one without a help text must at least show its values."""
    for command, parser in parsers().items():
        for action in parser._actions:
            if action.option_strings and action.help is None:
                assert action.choices or action.metavar, f"{command} {action.option_strings}"
