"""The suite's own layout: shared helpers live in tests/builders.py, helper modules and
conftest files, so no test module imports another (running one file never runs another's
imports, and moving a test never breaks a second file)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import parse_python

TESTS = Path(__file__).resolve().parent


def _imported(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def test_no_test_module_imports_another() -> None:
    found = []
    for path, tree in parse_python(sorted(TESTS.rglob("*.py"))):
        for name in _imported(tree):
            parts = name.split(".")
            if parts[0] == "tests" and any(p.startswith("test_") for p in parts[1:]):
                found.append(f"{path.relative_to(TESTS.parent)} imports {name}")
    assert found == []


def test_no_test_reads_the_shared_folder_beside_the_repository() -> None:
    """A clone passes its tests alone: tests read tests/data/ (tests/conftest.py's DATA), never
    ../shared (.ci/run also runs the quick suite on a clone with no ../shared above it)."""
    beside = re.compile("shared" + r"""/data|parent\s*/\s*["']shared["']""")  # not itself
    found = [
        f"{path.relative_to(TESTS.parent)}:{number}"
        for path in sorted(TESTS.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if beside.search(line)
    ]
    assert found == []


def test_the_tests_mirror_the_packages_they_test() -> None:
    """tests/stretto, tests/proxy and tests/warehouse mirror their packages: every folder of
    tests under them is named as a package beside the source (a wing moved or renamed takes
    its tests' folder along)."""
    root = TESTS.parent
    strays = [
        str(folder.relative_to(root))
        for top in ("stretto", "proxy", "warehouse")
        for folder in sorted((TESTS / top).rglob("*"))
        if folder.is_dir()
        and folder.name != "__pycache__"
        and any(folder.glob("test_*.py"))
        and not (root / folder.relative_to(TESTS) / "__init__.py").is_file()
    ]
    assert not strays, f"test folders with no package of that name: {strays}"
