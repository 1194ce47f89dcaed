"""Imports go at the top: each import inside a function says why it is there.

docs/architecture.md ("Where imports go") keeps an import inside a function only where it
earns its place (an entry point, the proxy's start-up, a heavy library one rare function
needs) and then with a comment that says why: on one of its lines, or on the line above it, or
above the run of imports it belongs to (one comment covers the group, across isort's blank
lines between sections). A marker alone (`# noqa`,
`# type: ignore`) says nothing. Each import inside a function without a reason is printed as
`path:line: import ...`, and the exit status is 1; none, 0. Imports under `if TYPE_CHECKING:`
do not run and are not read.

    python scripts/lazy_imports.py [--all] [FOLDER ...]    (default: the project's five packages)

--all prints every import inside a function, with a reason or not, and exits 0 (to count them).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

FOLDERS = ("stretto", "proxy", "warehouse", "assets", "pipeline")


def is_type_checking(node: ast.AST) -> bool:
    """Whether `node` is `if TYPE_CHECKING:` (or `if typing.TYPE_CHECKING:`)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


Import = ast.Import | ast.ImportFrom


def function_imports(tree: ast.AST) -> list[tuple[Import, list[Import]]]:
    """Each import inside a function, outside `if TYPE_CHECKING:` blocks, with the run of
    imports it ends: itself and the imports right before it in the same block (isort's blank
    lines between sections do not break a run)."""
    found: list[tuple[Import, list[Import]]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        inside = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for _, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            run: list[Import] = []
            for child in children:
                if not isinstance(child, ast.AST):
                    continue
                if is_type_checking(child):
                    run = []
                    continue
                if isinstance(child, Import):
                    run = [*run, child]
                    if inside:
                        found.append((child, run))
                    continue
                run = []
                visit(child, inside)

    visit(tree, False)
    return found


def says_why(line: str) -> bool:
    """Whether `line` has a comment that is more than a linter's or type checker's marker."""
    if "#" not in line:
        return False
    comment = line.split("#", 1)[1].strip()
    return not comment.startswith(("noqa", "type: ignore")) or "#" in comment


def has_reason(lines: list[str], node: Import, run: list[Import]) -> bool:
    """Whether the import `node` says why: a comment on one of its lines, or on the line above
    it or above an import before it in its run (one comment may cover a group)."""
    if any(says_why(line) for line in lines[node.lineno - 1 : node.end_lineno]):
        return True
    for member in run:
        above = member.lineno - 2
        if above >= 0 and lines[above].strip().startswith("#"):
            return True
    return False


def unexplained(path: Path, everything: bool = False) -> list[tuple[int, str]]:
    """(line, first line of the import) for each import inside a function in `path` that has no
    comment saying why; with `everything`, for each import inside a function."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    return [
        (node.lineno, lines[node.lineno - 1].strip())
        for node, run in function_imports(ast.parse(text, str(path)))
        if everything or not has_reason(lines, node, run)
    ]


def main(argv: list[str]) -> int:
    everything = "--all" in argv
    folders = [arg for arg in argv if arg != "--all"] or list(FOLDERS)
    count = 0
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.py")):
            for lineno, line in unexplained(path, everything):
                print(f"{path}:{lineno}: {line}")
                count += 1
    if everything:
        print(f"{count} imports inside functions", file=sys.stderr)
        return 0
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
