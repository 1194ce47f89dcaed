"""The proxy starts fast: it loads what it needs before the first byte and nothing more, and its
import set cannot grow unnoticed (issue 20; docs/performance.md says what each costs).

Each run is the proxy's own entry (proxy.cli.main, as the stretto-proxy script calls it) in a
fresh interpreter that notes every module loaded after the interpreter's start, and which
thread loaded it. A module added to the proxy's start-up must be added here, on purpose.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import PYTHON

# Loads the proxy the way the console script does, and says afterwards what got loaded.
WATCHED_RUN = """
import sys, _thread
before = set(sys.modules)
forwarding_thread = _thread.get_ident()
by_forwarding_thread = set()
def note(event, args):
    if event == "import" and _thread.get_ident() == forwarding_thread:
        by_forwarding_thread.add(args[0])
sys.addaudithook(note)
from proxy.cli import main
status = main(sys.argv[1:])
loaded = sorted(set(sys.modules) - before)
first = sorted(by_forwarding_thread - before)
import json
print(json.dumps({"loaded": loaded, "forwarding_thread": first}), file=sys.stderr)
sys.exit(status)
"""

# Everything `stretto-proxy --record DIR -- cat` loads beyond the interpreter's own start: no
# re, json, enum, threading, signal or argparse (tens of milliseconds between them).
PLAIN = {
    "__future__",
    "_json",  # the C half of json: scanner and encoder (proxy.cjson)
    "proxy",
    "proxy.cjson",
    "proxy.cli",
    "proxy.options",
    "proxy.record",  # the wings' packages: a docstring each, no imports
    "proxy.transport",
    "proxy.transport.outlet",
    "proxy.transport.pump",
    "proxy.record.recorder",
    "proxy.record.redact",
    "proxy.relay",
    "proxy.session",
    "proxy.transport.upstream_stdio",
    "proxy.wire",
    "select",
    "stretto",
    "stretto.model",
    "stretto.model.defaults",
    "stretto.vocabulary",  # the log's version (proxy.record.recorder); it imports nothing
}
# With --flow FILE, the thread that forwards loads only these more; the flow itself is loaded
# on a thread of its own once the server has said something (proxy.serve.flowload).
FLOW_FORWARDING = PLAIN | {"proxy.serve", "proxy.serve.flowfeed", "proxy.serve.flowload"}
# ... and, once loaded, the flow has brought these packages (the serving model, jsonschema
# and jsonpath-ng with what they use).
FLOW_PACKAGES = {
    *("_ast", "_bisect", "_bz2", "_collections", "_compression", "_datetime", "_decimal"),
    *("_functools", "_heapq", "_json", "_lzma", "_opcode", "_operator", "_random", "_sha512"),
    *("_socket", "_sre", "_string", "_struct", "_typing", "_uuid", "_weakrefset", "__future__"),
    *("array", "ast", "atexit", "attr", "attrs", "binascii", "bisect", "bz2", "collections"),
    *("contextlib", "copy", "copyreg", "dataclasses", "datetime", "decimal", "dis", "enum"),
    *("errno", "fnmatch", "fractions", "functools", "heapq", "idna", "importlib", "inspect"),
    *("ipaddress", "itertools", "json", "jsonpath_ng", "jsonschema", "jsonschema_specifications"),
    *("keyword", "linecache", "logging", "lzma", "math", "ntpath", "numbers", "opcode"),
    *("operator", "pathlib", "platform", "pprint", "proxy", "random", "re", "referencing"),
    *("reprlib", "rpds", "select", "shutil", "stretto", "string", "struct", "tempfile"),
    *("textwrap", "threading", "token", "tokenize", "traceback", "types", "typing"),
    *("typing_extensions", "unicodedata", "urllib", "uuid", "warnings", "weakref", "zipfile"),
    "zlib",
    # jsonschema's format checkers import these when installed (moto brings them): beside the
    # forwarding thread, with the flow
    *("_locale", "calendar", "jsonpointer", "locale", "rfc3339_validator", "six"),
}
NEVER = {"dagster", "duckdb", "polars", "pyarrow", "numpy", "pandas", "matplotlib", "rich", "mcp"}
NEVER |= {"subprocess", "asyncio", "argparse", "signal", "starlette", "uvicorn"}  # --listen's
LINE = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'


def watched_run(*argv: str) -> dict[str, set[str]]:
    done = subprocess.run(
        [PYTHON, "-c", WATCHED_RUN, *argv], input=LINE, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == LINE
    seen = json.loads(done.stderr.decode().strip().splitlines()[-1])
    return {name: set(modules) for name, modules in seen.items()}


def packages(modules: set[str]) -> set[str]:
    return {module.split(".")[0] for module in modules}


def test_forwarding_and_recording_load_exactly_the_plain_set(tmp_path: Path) -> None:
    seen = watched_run("--record", str(tmp_path / "logs"), "--", "cat")
    assert seen["loaded"] == seen["forwarding_thread"]  # no other thread
    assert seen["loaded"] <= PLAIN, f"new at start-up: {sorted(seen['loaded'] - PLAIN)}"
    assert {"proxy.transport.pump", "proxy.relay", "proxy.record.recorder", "_json"} <= seen[
        "loaded"
    ]
    assert not {"re", "json", "enum", "threading", "functools"} & seen["loaded"]
    assert not packages(seen["loaded"]) & NEVER


def test_a_flow_loads_beside_the_forwarding_thread(tmp_path: Path, shop_flow_path: Path) -> None:
    seen = watched_run(
        "--record", str(tmp_path / "logs"), "--flow", str(shop_flow_path), "--", "cat"
    )
    forwarding = seen["forwarding_thread"]
    assert forwarding <= FLOW_FORWARDING, f"new: {sorted(forwarding - FLOW_FORWARDING)}"
    assert "proxy.serve.flowserver" in seen["loaded"] and "proxy.serve.flowserver" not in forwarding
    assert "jsonschema" in packages(seen["loaded"]) - packages(forwarding)
    new = packages(seen["loaded"]) - FLOW_PACKAGES
    assert not new, f"the flow now brings {sorted(new)}"
    assert not packages(seen["loaded"]) & NEVER
    (flow_log,) = (tmp_path / "logs").glob("*.flow.jsonl")  # it was served, though late


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
        "--flow-shadow",
        "--listen",
        "--listen-token-file",
        "--listen-idle",
    ):
        assert option in done.stdout


def test_serving_an_arbiter_loads_the_oracle_but_nothing_heavy() -> None:
    """An arbiter flow makes the proxy import stretto.oracle (when it serves one): still no
    numpy, no Dagster, no DuckDB, no polars."""
    code = (
        "import sys, proxy.cli, proxy.serve.flowserver, stretto.oracle.judge, "
        "stretto.oracle.oracle, "
        "stretto.oracle.state, stretto.oracle.runners.openai, stretto.oracle.runners.ollama\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert {"proxy", "stretto"} <= loaded
    assert not loaded & {"dagster", "duckdb", "polars", "pyarrow", "mcp", "numpy", "pandas"}
