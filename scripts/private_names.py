"""No private names across modules: `make lint` runs this over the five packages.

A name that starts with one underscore is its module's own; a module that imports another's
(`from warehouse.counts.learn import _levels`, or `audit._score(...)` on an imported module) ties
itself to what that module may change freely. A name other modules need is made public, with
a docstring. Each use is printed as `path:line: module.name`, and the exit status is 1; none,
0. Tests are not read: a test may import a private name to test that very function.

    python scripts/private_names.py [FOLDER ...]    (default: the project's five packages)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

FOLDERS = ("stretto", "proxy", "warehouse", "assets", "pipeline")


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def module_of(path: Path) -> str:
    """The dotted name of the module at `path` (relative to the current folder)."""
    parts = path.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_uses(path: Path, ours: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, module.name) for each private name of another module of ours used in `path`:
    imported by name, or read as an attribute of a module imported whole."""
    here = module_of(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    modules: dict[str, str] = {}  # local name -> one of our modules imported whole
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in ours:
                continue
            for alias in node.names:
                if is_private(alias.name) and node.module != here:
                    found.append((node.lineno, f"{node.module}.{alias.name}"))
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ours and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and is_private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and modules[node.value.id] != here
        ):
            found.append((node.lineno, f"{modules[node.value.id]}.{node.attr}"))
    return sorted(found)


def main(argv: list[str]) -> int:
    folders = tuple(argv) or FOLDERS
    count = 0
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.py")):
            for line, name in private_uses(path, folders):
                print(f"{path}:{line}: {name}")
                count += 1
    if count:
        print(
            f"{count} private name(s) used across modules: make each public, with a docstring "
            "(docs/architecture.md)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
