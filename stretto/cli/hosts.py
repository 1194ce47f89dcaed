"""`stretto init`: the MCP host configuration that runs a server behind stretto-proxy — printed,
or merged into the host's configuration file — and the steps from there to a served flow."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from stretto.home import Paths


@dataclass(frozen=True)
class Host:
    where: str  # where its configuration lives
    table: str  # the key of its table of servers
    typed: bool  # whether an entry says "type": "stdio"
    add: str  # how to add the printed JSON


HOSTS = {
    "claude-desktop": Host(
        "claude_desktop_config.json (Settings > Developer > Edit Config)",
        "mcpServers",
        False,
        "put it into claude_desktop_config.json (Settings > Developer > Edit Config), "
        "or run this again with --write PATH; then restart Claude Desktop",
    ),
    "claude-code": Host(
        ".mcp.json in the project",
        "mcpServers",
        True,
        "add it with `claude mcp add-json NAME '<the JSON above>'`, "
        "or run this again with --write .mcp.json (the project's servers)",
    ),
    "cursor": Host(
        "~/.cursor/mcp.json, or .cursor/mcp.json in the project",
        "mcpServers",
        False,
        "put it into ~/.cursor/mcp.json (or the project's .cursor/mcp.json), "
        "or run this again with --write PATH",
    ),
    "vscode": Host(
        ".vscode/mcp.json in the workspace",
        "servers",
        True,
        "put it into .vscode/mcp.json in the workspace, or run this again with --write PATH",
    ),
}

# The name of one of several servers (`--server NAME=COMMAND`): no path separators, no leading
# dot or dash. (The domain, `--name`, follows stretto.logs.domain.)
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
LAUNCHERS = {"npx", "uvx", "node", "python", "python3", "docker", "run", "deno", "bunx"}


class InitError(Exception):
    """A configuration that cannot be written; the message says why."""


def server_name(command: list[str]) -> str:
    """A short name for the server, from its command: the package or program, no scope or
    `mcp-server-` prefix (`@modelcontextprotocol/server-filesystem` -> `filesystem`)."""
    words = [w for w in command if not w.startswith("-")]
    candidates = [w for w in words if Path(w).name not in LAUNCHERS]
    base = (candidates or words or ["server"])[0]
    base = Path(base).name.split("@")[0] or base.split("/")[-1]
    base = re.sub(r"^(mcp-server-|server-)", "", base)
    return re.sub(r"[^A-Za-z0-9_-]+", "-", base).strip("-") or "server"


def command_problem(command: list[str]) -> str | None:
    """Why the host would fail to start the server's `command` on this machine (its program
    not found on PATH, not a file, or not executable), or None. A relative path is looked up
    from here, but the host starts it from a folder of its own: that is said too."""
    program = command[0]
    if "/" not in program:
        return None if shutil.which(program) else f"{program!r} is not found on PATH"
    path = Path(program).expanduser()
    if not path.is_file():
        return f"{program} does not exist" if not path.exists() else f"{program} is not a file"
    if not os.access(path, os.X_OK):
        return f"{program} is not executable"
    if not path.is_absolute():
        return f"{program} is a relative path; the host starts servers from a folder of its own"
    return None


def home_text(given: str | None) -> str:
    """The home as the configuration names it: --home or $STRETTO_HOME made absolute, else
    `~/.stretto` as written (the proxy expands `~` itself)."""
    home = given or os.environ.get("STRETTO_HOME")
    return str(Path(home).expanduser().resolve()) if home else "~/.stretto"


def record_folder(home: str, name: str, *, shadow: bool, explore: float | None) -> str:
    """Sessions served exploring and sessions served in shadow mode each get a folder of their
    own (`evaluate` wants only exploring logs); the others go to the domain's logs."""
    where = Paths(Path(home))  # as written: `~` stays for the proxy to expand
    return str((where.explore if explore else where.shadow if shadow else where.logs) / name)


def proxy_path() -> str:
    """The stretto-proxy beside this stretto: hosts do not start servers from a shell, so the
    configuration names it in full."""
    return str(Path(sys.executable).parent / "stretto-proxy")


def server_entry(
    host: str,
    command: list[str],
    *,
    name: str,
    record: str,
    flow: str | None = None,
    decider: str | None = None,
    shadow: bool = False,
    explore: float | None = None,
    server_name: str | None = None,
) -> dict:
    """The host's entry for the server: stretto-proxy recording into `record` (and serving
    `flow`), then the server's command. `server_name`: one of several servers of the domain
    `name` (`stretto init --server`), named so in its logs."""
    args = ["--record", record, "--domain", name]
    if server_name:
        args += ["--server-name", server_name]
    if flow:
        args += ["--flow", flow]
        if decider:
            args += ["--flow-decider", decider]
        if shadow:
            args.append("--flow-shadow")
        if explore:
            args += ["--flow-explore", f"{explore:g}"]
    entry: dict = {"command": proxy_path(), "args": [*args, "--", *command]}
    return {"type": "stdio", **entry} if HOSTS[host].typed else entry


def printed(host: str, name: str, entry: dict) -> dict:
    """What init prints: the JSON `claude mcp add-json` takes for Claude Code, else the
    fragment of the configuration file (the server under the host's table)."""
    return entry if host == "claude-code" else {HOSTS[host].table: {name: entry}}


def parse_servers(specs: list[str]) -> dict[str, list[str]]:
    """`--server NAME=COMMAND` (the command as a shell would split it), each name once."""
    servers: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, command = spec.partition("=")
        if not sep or not NAME.fullmatch(name) or "::" in name:
            raise InitError(
                f"--server {spec!r}: give NAME=COMMAND, NAME of letters, digits, '_', '.' "
                "and '-' (e.g. --server 'github=github-mcp-server stdio')"
            )
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise InitError(f"--server {name}: its command does not split: {exc}") from None
        if not words:
            raise InitError(f"--server {name}: no command after '='")
        if name in servers:
            raise InitError(f"--server {name}: given twice")
        servers[name] = words
    return servers


def write_entries(path: Path, host: str, entries: dict[str, dict], *, force: bool) -> str:
    """Merge the servers' entries into the host's configuration file at `path` (created when
    missing), keeping everything else in it and a backup of the file as it was, in one write.
    A different entry of the same name is replaced only with `force`. What was done, in
    words."""
    table_key = HOSTS[host].table
    config: dict = {}
    if path.exists():
        try:
            config = json.loads(path.read_text(encoding="utf-8") or "{}")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InitError(f"{path}: not JSON ({exc}); fix it or give another --write") from exc
        if not isinstance(config, dict):
            raise InitError(f"{path}: expected a JSON object at the top")
    table = config.setdefault(table_key, {})
    if not isinstance(table, dict):
        raise InitError(f"{path}: field `{table_key}`: expected an object of servers")
    names = ", ".join(f"`{n}`" for n in entries)
    if all(table.get(n) == e for n, e in entries.items()):
        return f"{path} already has {'this' if len(entries) == 1 else 'these'} {names} " + (
            "server; nothing written" if len(entries) == 1 else "servers; nothing written"
        )
    for name, entry in entries.items():
        if name in table and table[name] != entry and not force:
            raise InitError(
                f"{path}: field `{table_key}.{name}`: a different server of that name is "
                "there; give --force to replace it (the file is backed up first), or another "
                "name"
            )
    replaced = [n for n in entries if n in table]
    table.update(entries)
    backup = _backup(path) if path.exists() else None
    _write_atomically(path, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    plural = "server" if len(entries) == 1 else "servers"
    done = f"{'replaced' if replaced else 'added'} the {names} {plural} in {path}"
    return done + (f" (the file as it was: {backup})" if backup else "")


def _backup(path: Path) -> Path:
    """A copy of `path` beside it that no earlier backup is overwritten by."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    backup = path.with_name(f"{path.name}.{stamp}.bak")
    n = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.{stamp}-{n}.bak")
        n += 1
    shutil.copy2(path, backup)
    return backup


def _write_atomically(path: Path, text: str) -> None:
    """Write through a temporary file and a rename, so the host never reads half a file; an
    existing file keeps its mode, a new one is 0600 (other servers' entries hold secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def next_steps(
    host: str,
    name: str,
    home: str,
    record: str,
    *,
    flow: str | None,
    shadow: bool,
    explore: float | None,
    written: bool,
) -> str:
    """What to do from here, as commands to run (`stretto` on PATH)."""
    first = "restart the host" if written else HOSTS[host].add.replace("NAME", name)
    lines = ["Next:", f"  1. {first}"]
    flows = Paths(Path(home))  # as written: `~` stays for the user's shell to expand
    new_flow = str(flows.flow(name))
    if not flow and Path(new_flow).expanduser().exists():  # learning must not overwrite it
        new = flows.flow(name, "new")
        lines += [
            f"  2. use it as usual: each session is recorded into {record}/",
            f"  3. after a few sessions, learn a flow from them ({new_flow} is there already):",
            f"     stretto learn --sessions {record} --domain {name} --habit-only --out {new}",
            f"  4. review it against that one: stretto flow-diff {new_flow} {new}",
            f"  5. serve it: run this command again with --flow {new}"
            + (" --force" if written else ""),
        ]
    elif not flow:
        lines += [
            f"  2. use it as usual: each session is recorded into {record}/",
            "  3. after a few sessions, learn a flow from them:",
            f"     stretto learn --sessions {record} --domain {name} --habit-only --out {new_flow}",
            f"  4. review it: stretto flow-show {new_flow}",
            f"  5. serve it: run this command again with --flow {new_flow}"
            + (" --force" if written else ""),
        ]
    elif explore:
        lines += [
            f"  2. the proxy serves {flow}, taking another option {explore:g} of the time; "
            f"sessions and their flow logs go to {record}/",
            "  3. after a few sessions, estimate what other rules would have done:",
            f"     stretto evaluate --sessions {record} --flow {flow}",
        ]
    elif shadow:
        lines += [
            f"  2. the proxy decides and logs with {flow} but looks nothing up; sessions and "
            f"their flow logs go to {record}/",
            "  3. after a few sessions, promote the sites whose lookups the agent made itself:",
            f"     stretto promote --flow {flow} --shadow {record} "
            f"--out {flows.flow(name, 'promoted')}",
            "  4. serve the promoted flow: run this command again with --flow "
            f"{flows.flow(name, 'promoted')}, without --shadow"
            + (" and with --force" if written else ""),
        ]
    else:
        new = flows.flow(name, "new")
        lines += [
            f"  2. the proxy serves {flow}; sessions go to {record}/, with the flow's "
            "decisions in a .flow.jsonl beside each",
            "  3. later, learn again from every session and see what changed:",
            f"     stretto learn --sessions {record} --domain {name} --habit-only --out {new}",
            f"     stretto flow-diff {flow} {new}",
        ]
    return "\n".join(lines)
