"""stretto.vocabulary is the one definition of the names and numbers the layers share: no other
module of the product defines them again, and the warehouse's SQL holds no literal copy (it
gets them through warehouse.sql.statements)."""

from __future__ import annotations

import ast
import re

import pytest

from stretto import vocabulary
from tests.conftest import ROOT, parse_python
from warehouse.sql import SQL_DIR, VOCABULARY, statements, with_vocabulary

PRODUCT = ("stretto", "proxy", "warehouse", "assets", "pipeline", "bench")
SHARED = {
    "RESPOND",
    "RESPOND_END",
    "LOG_VERSION",
    "LOG_VERSIONS_READ",
    "PROTOCOL_VERSION",
    "SAME_TURN_MS",
    "FLOOR",
    "FOLDS",
    "fnv1a64",
    "fold_of",
}
# Values that, written out, would be a second copy of the vocabulary's.
COPIED_VALUES = {vocabulary.RESPOND, vocabulary.RESPOND_END, vocabulary.PROTOCOL_VERSION}


def product_modules() -> list:
    return [
        path
        for folder in PRODUCT
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != ROOT / "stretto" / "vocabulary.py"
    ]


def definitions(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level (assignments and functions)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
    return names


def test_no_product_module_defines_the_vocabulary_again():
    again = {}
    for path, tree in parse_python(product_modules()):
        copied = definitions(tree) & SHARED
        written = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in COPIED_VALUES
        }
        if copied or written:
            again[str(path.relative_to(ROOT))] = sorted(copied | written)
    assert again == {}, "defined again instead of imported from stretto.vocabulary"


def sql_without_comments(path) -> str:
    return "\n".join(line.split("--", 1)[0] for line in path.read_text().splitlines())


@pytest.mark.parametrize("path", sorted(SQL_DIR.glob("*.sql")), ids=lambda p: p.name)
def test_sql_gets_the_vocabulary_as_placeholders_not_literals(path):
    sql = sql_without_comments(path)
    for literal in (vocabulary.RESPOND, vocabulary.RESPOND_END):
        assert f"'{literal}'" not in sql, f"{path.name}: write {{RESPOND}} / {{RESPOND_END}}"
    # the same-turn window: a difference of times compared with a number
    gap = r"t_ms\s*-\s*[\w.]+_ms\s*[<>]=?\s*\d"
    assert not re.search(gap, sql), f"{path.name}: write {{SAME_TURN_MS}}"
    versions = "->> '$.stretto_mcp_log') NOT IN ('"  # the header's version, as text
    assert versions not in sql, f"{path.name}: write {{LOG_VERSIONS_READ}}"
    # every placeholder is known, and none is left once the statements are read
    assert set(re.findall(r"\{([A-Z][A-Z_]*)\}", sql)) <= set(VOCABULARY)
    for _, statement in statements(path.stem):
        assert not re.search(r"\{[A-Z][A-Z_]*\}", statement)


def test_every_sql_placeholder_is_used_and_says_the_vocabulary_value():
    used = set()
    for path in SQL_DIR.glob("*.sql"):
        used |= set(re.findall(r"\{([A-Z][A-Z_]*)\}", path.read_text()))
    assert used == set(VOCABULARY)
    assert with_vocabulary("{RESPOND} {RESPOND_END} {SAME_TURN_MS}") == (
        "'respond' 'respond (end)' 500"
    )
    assert with_vocabulary("x IN ({LOG_VERSIONS_READ}), {LOG_VERSIONS_SAID}") == (
        "x IN ('1', '2'), '1 and 2'"
    )
    with pytest.raises(KeyError):
        with_vocabulary("{NOT_A_WORD}")


def test_folds_keep_the_specs_hash_of_the_task_modulo_five():
    """The folds tasks have always had (../shared/spec/algorithms.md §0: FNV-1a with the offset
    1469598103934665603), so that a flow's arbiter folds, calibration's and the gate's do not
    move when the code does."""
    assert vocabulary.fnv1a64("") == 1469598103934665603
    assert vocabulary.fnv1a64("foobar") == 9870438755804841970
    assert vocabulary.FOLDS == 5
    tasks = ("", "a", "foobar", "retail_task_17")
    assert [vocabulary.fold_of(t) for t in tasks] == [3, 1, 0, 2]
    assert [vocabulary.fold_of(t, 3) for t in tasks] == [1, 0, 1, 2]
