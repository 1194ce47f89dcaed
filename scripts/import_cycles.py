"""No import cycles between our modules: `make lint` runs this over the five packages.

A cycle can hide behind an import inside a function (the module loads, so nothing fails), and
it ties the modules together all the same: neither can be read, tested or moved without the
other. grimp reads every import, at the top of a module or inside a function, as
import-linter does. Each cycle is printed as one loop of imports with their lines, and the exit
status is 1; no cycle, 0.

    python scripts/import_cycles.py [PACKAGE ...]    (default: the project's five)
"""

from __future__ import annotations

import sys

import grimp

PACKAGES = ("stretto", "proxy", "warehouse", "assets", "pipeline")


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The graph's strongly connected components of more than one module, each sorted (Tarjan's
    algorithm, iterative: the graph is deeper than Python's recursion allows to be safe)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append(
                        (other, iter(sorted(graph.find_modules_directly_imported_by(other))))
                    )
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def one_loop(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    """A loop through the component's first module: its first import into the component, then
    the shortest way back."""
    start = component[0]
    members = set(component)
    first = min(m for m in graph.find_modules_directly_imported_by(start) if m in members)
    back = graph.find_shortest_chain(importer=first, imported=start)
    assert back is not None  # both are in one strongly connected component
    return [start, *back]


def describe(graph: grimp.ImportGraph, loop: list[str]) -> list[str]:
    """Each import of the loop with where it is written."""
    lines = []
    for importer, imported in zip(loop, loop[1:], strict=False):
        first = graph.get_import_details(importer=importer, imported=imported)[:1]
        where = [f"line {d['line_number']}: {d['line_contents']}" for d in first]
        lines.append(f"    {importer} -> {imported}    ({''.join(where)})")
    return lines


def main(argv: list[str]) -> int:
    graph = grimp.build_graph(*(argv or PACKAGES), cache_dir=None)
    found = cycles(graph)
    for component in found:
        print(f"import cycle among {len(component)} modules: {', '.join(component)}")
        print("\n".join(describe(graph, one_loop(graph, component))))
    if found:
        print(
            f"{len(found)} import cycle(s): put what both sides need where both can import it "
            "(docs/architecture.md)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
