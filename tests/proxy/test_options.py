"""stretto-proxy reads a plain command line without argparse (~8 ms of imports), and gets
exactly what argparse gets; anything else it leaves to argparse."""

from __future__ import annotations

import contextlib
import io

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.options import OPTIONS, build_parser, parse_args, quick_parse

VALUES = st.sampled_from(
    ["logs", "~/x", "0.5", "1", "-1", "-0.5", "", "nan", "1e3", "3", "07", "reach", "habit", "a,b"]
    + ["x=y", "--", "-", " 2 ", "0x1f", "inf", "é"]
)
NAMES = st.sampled_from([*OPTIONS, "--rec", "--flow-t", "--bogus", "-x", "-V", "positional"])


def fitting(option: str) -> st.SearchStrategy[str]:
    """A value of the option's own kind (or, now and then, anything)."""
    _, kind, kind_type, _, _, _ = OPTIONS[option]
    if isinstance(kind_type, tuple):
        own = st.sampled_from(kind_type)
    elif kind_type is float:
        own = st.floats(allow_nan=False).map(repr)
    elif kind_type is int:
        own = st.integers(-5, 10**6).map(str)
    else:
        own = st.text(min_size=1, max_size=8)
    return st.one_of(own, own, own, VALUES)


@st.composite
def command_lines(draw) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        name = draw(st.one_of(st.sampled_from(list(OPTIONS)), NAMES))
        plain = name in OPTIONS and OPTIONS[name][1] != "flag"
        value = draw(fitting(name) if name in OPTIONS else VALUES)
        form = draw(st.sampled_from(["apart", "apart", "joined", "bare"]))
        if form == "bare" or (name in OPTIONS and not plain and form == "apart"):
            argv.append(name)
        elif form == "apart":
            argv += [name, value]
        else:
            argv.append(f"{name}={value}")
    return argv


def argparse_reads(argv: list[str]) -> dict | None:
    """What argparse makes of it, or None when it refuses (or prints help and exits)."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return vars(build_parser().parse_args(argv))
        except SystemExit:
            return None


@settings(max_examples=600, deadline=None)
@given(command_lines())
def test_the_quick_reading_is_argparse_s_or_none(argv: list[str]) -> None:
    quick = quick_parse(argv)
    if quick is not None:  # compared as text: nan is not equal to itself
        assert repr(vars(quick)) == repr(argparse_reads(argv)), argv


def test_plain_command_lines_are_read_quickly() -> None:
    for argv in (
        [],
        ["--record", "logs", "--domain", "shop", "--agent-model", "m-1"],
        ["--record=logs", "--flow", "f.json", "--flow-shadow", "--flow-threshold", "0.25"],
        ["--flow", "f", "--flow-tools", "a,b", "--flow-tools", "c", "--flow-per-call", "3"],
        ["--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "Authorization=TOKEN"],
        ["--flow", "f", "--flow-decider", "habit", "--flow-explore", "0.1", "--record", "d"],
    ):
        quick = quick_parse(argv)
        assert quick is not None, argv
        assert vars(quick) == argparse_reads(argv), argv


def test_parse_args_splits_off_the_server_command() -> None:
    args, command = parse_args(["--record", "logs", "--", "node", "srv.js", "--record", "x"])
    assert args.record == "logs" and command == ["node", "srv.js", "--record", "x"]
    assert args.flow_threshold is None and args.upstream_header == []  # None: the flow's own


def test_options_that_cannot_work_together_are_refused_with_the_reason(capsys) -> None:
    for argv, reason in (
        (["--flow-threshold", "1.5", "--", "cat"], "--flow-threshold wants a probability"),
        (["--flow-threshold", "inf", "--", "cat"], "--flow-threshold wants a probability"),
        (["--flow-explore", "-0.1", "--flow", "f", "--", "cat"], "--flow-explore wants"),
        (["--flow-shadow", "--", "cat"], "the --flow-* options need --flow"),
        (["--flow", "f.json", "--", "cat"], "--flow needs --record DIR"),
        (["--record", "logs"], "no server to wrap"),
    ):
        try:
            parse_args(argv)
        except SystemExit as exc:
            assert exc.code == 2, argv
        else:
            raise AssertionError(f"accepted: {argv}")
        assert reason in capsys.readouterr().err, argv
