"""`stretto learn`'s and `compile`'s options that say where the flow goes, which sessions
train it and how much each counts, checked before any work; and learning a folder of logs
with the pipeline's own assets (pipeline.learnfolder does it), saying why when it fails."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from stretto.cli.options import log_domains, other_domains, say
from stretto.home import Paths, make_private, private_dirs
from stretto.logs.rewards import read_rewards
from stretto.model.flow import load_flow


def resolved(path: str | Path) -> Path:
    return Path(path).expanduser().resolve()


MKDIR_HELP = "create --out's folder if it is missing (HOME/flows/ is created without it)"


def out_problem(out: str | Path, home: str | None, mkdir: bool) -> str | None:
    """Why a flow cannot be written to --out `out`: its folder is missing (a typo in a path
    would otherwise make folders nobody asked for) unless `mkdir`, or is the flows folder of
    the home, which stretto makes as it makes the home; or it is no folder. None if it can."""
    path = resolved(out)
    folder = path.parent
    if folder.is_dir():
        return None
    if folder.exists():
        return f"--out {out}: {folder} is not a folder"
    if mkdir or folder == Paths.at(home).flows:
        return None
    return f"--out {out}: the folder {folder} does not exist (create it, or give --mkdir)"


def learn_folder(
    sessions: Path,
    domain: str,
    out: Path,
    *,
    home: str | None,
    wait: float,
    manifest: str | None = None,
    constants: bool = False,
    options: dict[str, Any] | None = None,
    arbiter: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Learn the `domain` flow from a folder of session logs into `out` with the pipeline's
    own assets (pipeline.learnfolder.learn_folder, which says what the arguments are). The
    flow asset's metadata, or None after saying why the run failed."""
    # the pipeline loads Dagster: only the commands that learn pay for it
    from pipeline.learnfolder import LearnFolderError
    from pipeline.learnfolder import learn_folder as learn_with_pipeline

    try:
        return learn_with_pipeline(
            sessions,
            domain,
            out,
            home=home,
            wait=wait,
            manifest=manifest,
            constants=constants,
            options=options,
            arbiter=arbiter,
        )
    except LearnFolderError as exc:
        say(f"learn failed: {exc}")
        return None


def learn_to_finish(
    sessions: Path,
    domain: str,
    *,
    home: str | None,
    wait: float,
    **learning: Any,
) -> tuple[dict[str, Any], dict] | None:
    """learn_folder into a private draft (pipeline.learnfolder.draft_path), not the output
    path, for a flow the command adds to before it writes it once, finished (`--costs`,
    `--calibrate`): the flow asset's metadata and the flow learned, or None after saying why
    the run failed."""
    # the pipeline loads Dagster: only the commands that learn pay for it
    from pipeline.learnfolder import draft_path

    with draft_path(home, sessions) as draft:
        learned = learn_folder(sessions, domain, draft, home=home, wait=wait, **learning)
        return None if learned is None else (learned, load_flow(draft))


def otel_logs(export: str, manifest: dict | None, domain: str | None, folder: Path) -> int:
    """Write the traces of an OpenTelemetry export as session logs in `folder`, saying what
    was read and left out; how many sessions."""
    from stretto.logs.otel import read_otel, write_logs  # --otel only: the OTLP reader, ~40 ms

    result = read_otel(export, manifest, domain)
    private_dirs(folder)
    for path in write_logs(result, folder):
        make_private(path)  # session logs hold tool results: private, as the proxy writes them
    say(result.summary())
    return len(result.sessions)


def learning_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """--half-life and --rewards (and --surprise, --surprise-window where the command has
    them) as the flow asset's config, checked first; None after saying what is wrong."""
    options: dict[str, Any] = {}
    if args.half_life is not None:
        if not args.half_life > 0 or args.half_life == float("inf"):
            say(f"--half-life wants a number of sessions above 0, got {args.half_life:g}")
            return None
        options["half_life"] = args.half_life
    if args.rewards:
        read_rewards(args.rewards)  # a bad file is refused before any work, naming the field
        options["rewards"] = str(resolved(args.rewards))
    if getattr(args, "surprise", None) is not None:
        if not 0 < args.surprise <= 1:
            say(f"--surprise wants a quantile in (0, 1], got {args.surprise:g}")
            return None
        if args.surprise_window < 1:
            say(f"--surprise-window wants at least 1 step, got {args.surprise_window}")
            return None
        options.update(surprise=args.surprise, surprise_window=args.surprise_window)
    return options


def domain_matches(sessions: Path, domain: str) -> bool:
    """Whether `learn --domain` fits the logs: refused (False, said why) when the folder holds
    no session log, or every log names another domain (a typo: `ntoes` for `notes`); a
    warning when some logs name another domain."""
    found = log_domains(sessions, below=True)
    if not found:
        say(f"{sessions}: no session logs (*.jsonl) in it or below it")
        return False
    others = other_domains(found, domain)
    held = ", ".join(f"{d or 'no domain'} ({n})" for d, n in sorted(found.items(), key=str))
    if others and sum(others.values()) == found.total():
        say(f"no session in {sessions} is of the domain {domain!r}; its logs are of: {held}")
        return False
    if others:
        say(
            f"warning: {sum(others.values())} of {found.total()} sessions in {sessions} are of "
            f"another domain than {domain!r} ({held}); the {domain} flow learns from all of them"
        )
    return True
