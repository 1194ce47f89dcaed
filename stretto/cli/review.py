"""The commands a reviewer runs on flow files: flow-show, flow-diff."""

from __future__ import annotations

import argparse
import json
import sys

from stretto.cli.options import Commands, add_threshold, command, say
from stretto.model.flow import FlowError


def register(commands: Commands) -> None:
    show = command(
        commands,
        "flow-show",
        _flow_show,
        summary="show what a flow may do, for a reviewer",
        description="Markdown for a reviewer: the tools a flow may call and those it never "
        "calls, each site's lookups with what it would do (reach × binding chance against the "
        "threshold), each lookup's argument sources and binding chance, the program, where the "
        "flow came from, and its arbiter (the model it asks, its weights and record). --format "
        "json gives the same as data.",
        examples=[
            "stretto flow-show notes.flow.json",
            "stretto flow-show notes.flow.json --threshold 0.5 --format json",
        ],
    )
    show.add_argument("flow", metavar="FLOW")
    add_threshold(show, "the threshold a site without its own is judged against")
    show.add_argument("--format", choices=("markdown", "json"), default="markdown")

    flow_diff = command(
        commands,
        "flow-diff",
        _flow_diff,
        summary="list what changed between two flows (exit 1: needs review)",
        description="A change list for a pull request. Exit 0 when NEW can do nothing OLD "
        "could not; exit 1 when it can (a new lookup, a new source for an argument, a new "
        "constant, a changed program, a site switched on or a threshold lowered, a new tool it "
        "may call, a site promoted, an arbiter added or asking another model), listed under "
        "'Needs review'; exit 2 on an error. Changed probabilities, counts and arbiter weights "
        "are listed but need no review.",
        examples=[
            "git show HEAD:notes.flow.json > old.flow.json  # the flow as last committed",
            "stretto flow-diff old.flow.json notes.flow.json",
        ],
    )
    flow_diff.add_argument("old", metavar="OLD")
    flow_diff.add_argument("new", metavar="NEW")


def _flow_show(args: argparse.Namespace) -> int:
    # entry point: the review and the arbiter's check (~70 ms), for flow-show only
    from stretto.offline.lifecycle.flowshow import markdown, summary
    from stretto.oracle.arbiter import load_flow

    flow = load_flow(args.flow)
    if args.format == "json":
        print(json.dumps(summary(flow, args.threshold), indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(markdown(flow, args.threshold))
    return 0


def _flow_diff(args: argparse.Namespace) -> int:
    # entry point: the review and the arbiter's check (~70 ms), for flow-diff only
    from stretto.offline.lifecycle.flowdiff import diff, diff_markdown
    from stretto.oracle.arbiter import load_flow

    try:
        old, new = load_flow(args.old), load_flow(args.new)
    except FlowError as exc:
        say(str(exc))
        return 2
    review, other = diff(old, new)
    sys.stdout.write(diff_markdown(review, other))
    return 1 if review else 0
