"""`stretto redact`: a pseudonymised copy of a folder of session logs, to share or learn from
elsewhere (stretto.logs.redact does the copying). Learning needs none of it, and it learns
nothing: its own command family."""

from __future__ import annotations

import argparse
from pathlib import Path

from stretto.cli.options import Commands, add_hash_field, command, say
from stretto.logs.pseudonyms import KEEP_SHARED, SALT_ENV


def register(commands: Commands) -> None:
    redact = command(
        commands,
        "redact",
        _redact,
        summary="copy session logs with every value replaced by a salted hash",
        description="Write a pseudonymised copy of the session logs in DIR (and the flow log "
        "beside each) to OUT, one file per session: the arguments and results of every call, "
        "the conversation, notifications and error texts get salted hashes (h_ and 12 hex "
        "digits; the same value the same token in every session), while tool names, JSON "
        "structure, timings, the header, initialize and tools/list are kept, so a flow learned "
        "from the copy has the same sites, counts and binding sources. A value seen in N or "
        "more sessions is kept (--keep-shared; 0 keeps none) unless it is shaped like a secret "
        "or a personal identifier (a token, a key, an email, a phone, card or IBAN number, "
        "an IP address, a high-entropy string), and so are values of 3 "
        "characters or fewer and the names the tools' schemas declare. The salt is read from "
        "an environment variable, never from the command line.",
        examples=[
            "STRETTO_REDACT_SALT=$(cat ~/.stretto-salt) stretto redact --sessions logs/shop "
            "--out shared/shop",
            "stretto redact --sessions logs/shop --out shared/shop --keep-shared 0 "
            "--hash-field email,name  # hash every value",
        ],
    )
    redact.add_argument(
        "--sessions", required=True, metavar="DIR", help="a folder of session logs (*.jsonl)"
    )
    redact.add_argument(
        "--out", required=True, metavar="DIR", help="where to write the copy (not DIR or in it)"
    )
    redact.add_argument(
        "--salt-env",
        default=SALT_ENV,
        metavar="VAR",
        help="the environment variable holding the salt (default %(default)s; must be set "
        "and not empty)",
    )
    redact.add_argument(
        "--keep-shared",
        type=int,
        default=KEEP_SHARED,
        metavar="N",
        help="keep a value seen in N or more sessions, unless it is shaped like a secret or "
        "a personal identifier (default %(default)s; 0: hash them all)",
    )
    add_hash_field(
        redact,
        "always hash the values under this JSON key, and each of their words wherever they "
        "appear (repeatable, or comma-separated)",
    )


def _redact(args: argparse.Namespace) -> int:
    """A pseudonymised copy of a folder of session logs."""
    # entry point: only `stretto redact` loads the redaction walk
    from stretto.logs.redact import RedactError, check_request, redact_folder, salt_from_env

    sessions, out = Path(args.sessions).expanduser(), Path(args.out).expanduser()
    try:
        check_request(sessions, out, args.keep_shared)
        salt = salt_from_env(args.salt_env)
    except RedactError as exc:  # asked for what cannot be done: a usage error
        say(str(exc))
        return 2
    try:
        report = redact_folder(
            sessions,
            out,
            salt,
            keep_shared=args.keep_shared,
            hash_fields=args.hash_field,
        )
    except RedactError as exc:
        say(str(exc))
        return 1
    except OSError as exc:  # a folder that cannot be made, a file that cannot be read
        say(f"{exc.filename or out}: {exc.strerror or exc}")
        return 1
    for path in report.torn:
        say(f"warning: {path}: the last line is cut off (a crash mid-write?); dropped it")
    for what in report.left_out:
        say(f"left out {what}")
    shared = f"{report.shared} shared by {args.keep_shared}+ sessions, " if args.keep_shared else ""
    print(
        f"stretto: redacted {report.sessions} session log(s) and {report.flow_logs} flow "
        f"log(s) into {report.out}: {report.hashed} distinct values hashed; kept {shared}"
        f"{report.declared} names the tools declare, {report.short} of 3 characters or fewer"
    )
    return 0
