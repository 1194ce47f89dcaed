"""Runners by URI scheme (`--oracle URI`). Modules are imported when their scheme is used, so
naming one runner never loads the others."""

from __future__ import annotations

import importlib

from stretto.oracle.errors import UnknownRunner
from stretto.oracle.runners.base import Context, Reply, Runner, RunnerOptions

__all__ = ["Context", "Reply", "Runner", "RunnerOptions", "open_runner", "parse_uri", "SCHEMES"]

SCHEMES = {
    "ollama": ("stretto.oracle.runners.ollama", "OllamaRunner"),
    "claude": ("stretto.oracle.runners.claude", "ClaudeRunner"),
    "openai": ("stretto.oracle.runners.openai", "OpenAIRunner"),
    "jev": ("stretto.oracle.runners.jev", "JevRunner"),
    "simulate": ("stretto.oracle.runners.simulate", "SimulateRunner"),
}
REPLAY = "replay"
KNOWN = ", ".join(
    [
        *(f"{s}://MODEL" for s in sorted(SCHEMES) if s != "simulate"),
        "simulate://random|habit",
        REPLAY,
    ]
)


def parse_uri(uri: str) -> tuple[str, str]:
    """(scheme, model) of `scheme://MODEL`, or (`replay`, "") for `replay`."""
    text = uri.strip()
    if text == REPLAY:
        return REPLAY, ""
    scheme, sep, model = text.partition("://")
    if not sep:
        raise UnknownRunner(f"--oracle {uri!r}: expected scheme://MODEL or replay ({KNOWN})")
    if scheme not in SCHEMES:
        raise UnknownRunner(f"--oracle {uri!r}: no runner for `{scheme}://` (known: {KNOWN})")
    if not model:
        raise UnknownRunner(f"--oracle {uri!r}: name a model after `{scheme}://`")
    return scheme, model


def runner_class(scheme: str) -> type[Runner]:
    module, name = SCHEMES[scheme]
    return getattr(importlib.import_module(module), name)


def open_runner(
    uri: str, options: RunnerOptions | None = None, *, replayed: str | None = None
) -> Runner:
    """The runner an `--oracle` URI names. `replay` answers for the model `replayed` (the
    flow's arbiter's) from the cache only."""
    scheme, model = parse_uri(uri)
    if scheme == REPLAY:
        # by scheme: a runner is loaded when its scheme is used
        from stretto.oracle.runners.replay import ReplayRunner

        if not replayed:
            raise UnknownRunner(
                "--oracle replay: no model to replay (the flow has no arbiter to name one)"
            )
        replayed_scheme, replayed_model = parse_uri(replayed)
        if replayed_scheme == REPLAY:
            raise UnknownRunner("--oracle replay: cannot replay `replay`")
        return ReplayRunner(replayed_model, options, runner_class(replayed_scheme))
    return runner_class(scheme)(model, options)
