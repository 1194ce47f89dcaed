"""The proxy starts fast: nothing heavy on its import path."""

from __future__ import annotations

import subprocess

from tests.conftest import PYTHON

HEAVY = {"dagster", "duckdb", "polars", "pyarrow", "mcp", "numpy", "pandas", "subprocess"}
HEAVY |= {"jsonpath_ng", "jsonschema"}  # only a flow (--flow) needs them


def test_the_proxy_imports_nothing_heavy() -> None:
    code = (
        "import sys, proxy.cli, proxy.relay, proxy.recorder, proxy.redact, proxy.context, "
        "proxy.upstream_stdio, proxy.wire\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert "proxy" in loaded
    assert not loaded & HEAVY, loaded & HEAVY


def test_help_lists_every_option() -> None:
    done = subprocess.run([PYTHON, "-m", "proxy", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    for option in (
        "--record",
        "--domain",
        "--agent-model",
        "--context",
        "--upstream",
        "--upstream-header",
    ):
        assert option in done.stdout


def test_serving_an_arbiter_loads_the_oracle_but_nothing_heavy() -> None:
    """An arbiter flow makes the proxy import stretto.oracle (when it serves one): still no
    numpy, no Dagster, no DuckDB, no polars."""
    code = (
        "import sys, proxy.cli, proxy.serve, stretto.oracle.judge, stretto.oracle.oracle, "
        "stretto.oracle.state, stretto.oracle.runners.openai, stretto.oracle.runners.ollama\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert {"proxy", "stretto"} <= loaded
    assert not loaded & {"dagster", "duckdb", "polars", "pyarrow", "mcp", "numpy", "pandas"}
