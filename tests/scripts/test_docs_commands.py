"""Every command block of README.md and docs/cli.md runs as written, on what the walkthrough
left, and exits as the docs say — so the docs cannot drift from the commands.

How the Markdown is read: every fenced block names its language. `sh` blocks are commands; a
command ends where the shell would end it (quotes and `\\` continue it), and its comment may
say `exit N` (the status it must end with; else 0). An `sh` block that cannot run in a test is
marked by the comment `<!-- not run: NAME (why) -->` on the line before it, and NAME must be
one of NOT_RUN. `json` blocks must parse; `text` blocks are output or synopses.

How the commands run: as a newcomer runs them, from the repository's folder, with HOME a
copy of the walkthrough's (so `~/.stretto` is what `make run` left) and no STRETTO_HOME or
DAGSTER_HOME. The shell expands each command (bash: variables, `~`, globs, `$PWD`); `stretto`
runs in this process when the shell would find it on PATH (README.md activates the virtual
environment first; docs/cli.md assumes it), anything else in bash, whose exports and
assignments carry over to the next command."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from stretto.cli import main
from tests.conftest import ROOT
from tests.scripts.conftest import Walked, newcomer_env

DOCS = {"README.md": ROOT / "README.md", "docs/cli.md": ROOT / "docs/cli.md"}
NOT_RUN = {
    "README.md": {"quick-start", "make-targets", "console"},
    "docs/cli.md": {"dagster-dev"},
}
NOT_RUN_MARK = re.compile(r"<!-- not run: ([\w-]+) \(.+\) -->")
SHELL_ONLY = re.compile(r"[|<>;&`]|\$\(")  # pipes, redirections, lists, substitutions
EXPECTED_EXIT = re.compile(r"\bexit (\d+)\b")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence
    language: str
    text: str
    not_run: str | None  # the NOT_RUN name it is marked with


@dataclass(frozen=True)
class Command:
    line: int
    text: str  # without its comment
    comment: str

    @property
    def expected(self) -> int:
        said = EXPECTED_EXIT.search(self.comment)
        return int(said.group(1)) if said else 0


def blocks(doc: str) -> list[Block]:
    found, lines = [], DOCS[doc].read_text().splitlines()
    opened: tuple[int, str] | None = None
    for number, line in enumerate(lines, 1):
        if not line.startswith("```"):
            continue
        if opened is None:
            opened = (number, line[3:].strip())
            continue
        start, language = opened
        before = lines[start - 2] if start >= 2 else ""
        mark = NOT_RUN_MARK.fullmatch(before.strip())
        text = "\n".join(lines[start : number - 1])
        found.append(Block(doc, start, language, text, mark.group(1) if mark else None))
        opened = None
    assert opened is None, f"{doc}:{opened[0]}: a fence that is never closed"
    return found


def commands(block: Block) -> list[Command]:
    """The block's commands, each as the shell would read it: continued by an open quote or a
    trailing backslash; `# ...` outside quotes is a comment."""
    found: list[Command] = []
    text, comment, quote, start = "", "", None, 0
    for offset, line in enumerate(block.text.splitlines()):
        if not text and (not line.strip() or line.lstrip().startswith("#")):
            continue
        start = start if text else block.line + 1 + offset
        code, said, quote = _split_comment(line, quote)
        text, comment = text + code + "\n", (comment + " " + said).strip()
        if quote is None and not code.rstrip().endswith("\\"):
            found.append(Command(start, text.strip(), comment))
            text, comment = "", ""
    assert not text, f"{block.doc}:{block.line}: an unfinished command: {text}"
    return found


def _split_comment(line: str, quote: str | None) -> tuple[str, str, str | None]:
    """(code, comment, the quote still open at its end) of one line."""
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i + 1 :].strip(), None
    return line, "", quote


class Shell:
    """A newcomer's shell: the environment carries over from command to command."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env = env
        self.workdir = workdir

    def run(self, command: str) -> tuple[int, str]:
        words = shlex.split(command)
        if words[0] == "stretto" and not SHELL_ONLY.search(command):
            if not shutil.which("stretto", path=self.env["PATH"]):
                return 127, "bash: stretto: command not found (no `source .venv/bin/activate`?)"
            return self._stretto(self.expand(command)[1:])
        return self._bash(command)

    def expand(self, command: str) -> list[str]:
        """The words the shell makes of a command."""
        done = subprocess.run(
            ["bash", "-c", f"printf '%s\\0' {command}"],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.workdir,
            check=True,
        )
        return done.stdout.split("\0")[:-1]

    def _bash(self, command: str) -> tuple[int, str]:
        env_file = self.workdir.parent / "env"
        script = f'set -a\n{command}\nstatus=$?\nenv -0 > "{env_file}"\nexit $status\n'
        done = subprocess.run(
            ["bash", "-c", script],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.workdir,
        )
        if env_file.exists():
            pairs = env_file.read_text().split("\0")[:-1]
            self.env = dict(pair.split("=", 1) for pair in pairs)
            env_file.unlink()
        return done.returncode, done.stdout + done.stderr

    def _stretto(self, argv: list[str]) -> tuple[int, str]:
        out = io.StringIO()
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    status = main(argv)
                except SystemExit as exc:
                    if isinstance(exc.code, str):
                        print(exc.code, file=out)
                    status = 1 if isinstance(exc.code, str) else exc.code or 0
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return status, out.getvalue()


def newcomer_shell(walked: Walked, user_home: Path) -> Shell:
    """A shell in the repository's folder, HOME a copy of the walkthrough's, and the virtual
    environment not on PATH until someone activates it."""
    shutil.copytree(walked.user_home, user_home, symlinks=True)
    env = newcomer_env(user_home)
    venv_bin = str(ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env.pop("VIRTUAL_ENV", None)
    return Shell(env, ROOT)


def test_every_block_says_what_it_is() -> None:
    for doc in DOCS:
        found = blocks(doc)
        unnamed = [b.line for b in found if not b.language]
        assert unnamed == [], f"{doc}: blocks without a language (sh, json, text) at {unnamed}"
        marked = {b.not_run for b in found if b.not_run}
        assert marked == NOT_RUN[doc], f"{doc}: the blocks marked `not run`"
        assert all(b.language == "sh" for b in found if b.not_run)
        for block in found:
            if block.language == "json":
                json.loads(block.text)


def test_commands_are_read_as_the_shell_reads_them() -> None:
    block = Block(
        "x",
        1,
        "sh",
        "# a comment line\n"
        'stretto sql "SELECT 1 # not a comment\n'
        '  AS x"   # exit 1: it says so\n'
        "stretto learn --a \\\n    --b   # a note\n",
        None,
    )
    first, second = commands(block)
    assert first.text == 'stretto sql "SELECT 1 # not a comment\n  AS x"'
    assert first.expected == 1 and first.line == 3
    assert second.text == "stretto learn --a \\\n    --b" and second.expected == 0


@pytest.mark.slow  # runs every command block of the docs
@pytest.mark.parametrize("doc", list(DOCS))
def test_every_command_runs_as_the_docs_say(
    doc: str, walked: Walked, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(ROOT)
    shell = newcomer_shell(walked, tmp_path / "me")
    if doc == "docs/cli.md":  # it runs the commands bare, after README.md's activation
        assert shell.run("source .venv/bin/activate")[0] == 0
    ran, wrong = 0, []
    for block in blocks(doc):
        if block.language != "sh" or block.not_run:
            continue
        for command in commands(block):
            status, output = shell.run(command.text)
            ran += 1
            if status != command.expected or "Traceback" in output:
                wrong.append(
                    f"{doc}:{command.line}: `{command.text}` exited {status}, the docs say "
                    f"{command.expected}:\n{output[-2000:]}"
                )
    assert wrong == [], "\n\n".join(wrong)
    assert ran >= (15 if doc == "README.md" else 5)
