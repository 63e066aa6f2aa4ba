"""The layering of docs/architecture.md holds: every module imports, at run time, only the
sparklog packages and the restricted third-party libraries its package's row allows.

The rules are read from the table in docs/architecture.md, so the document and the check
cannot drift apart. Imports under ``if TYPE_CHECKING:`` are for type checkers only and are
not counted. A module belongs to the longest package path of the table that contains it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
RESTRICTED = ("kio", "pyspark", "confluent_kafka", "deltalake", "aiokafka", "kazoo")
"""Third-party libraries only some packages may use (the others are free for all)."""

_ROW = re.compile(r"^\|\s*`(?P<package>(?:pyspark_)?sparklog[\w.]*)`\s*\|(?P<owns>[^|]*)"
                  r"\|(?P<imports>[^|]*)\|(?P<third>[^|]*)\|\s*$")


def _names(cell: str) -> set[str]:
    return set(re.findall(r"`([\w.]+)`", cell))


def rules() -> dict[str, tuple[set[str], set[str]]]:
    """package -> (sparklog packages it may import, restricted libraries it may import)."""
    table = {}
    for line in DOC.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            table[match["package"]] = (_names(match["imports"]), _names(match["third"]))
    return table


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _owner(module: str, table: dict[str, object]) -> str:
    owners = [p for p in table if module == p or module.startswith(p + ".")]
    assert owners, f"{module} is in no package of {DOC.name}'s table: add its row"
    return max(owners, key=len)


def _runtime_imports(tree: ast.Module, module: str) -> set[str]:
    """Absolute names of what the module imports outside ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base
                                                                           else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _modules() -> list[Path]:
    return sorted([*ROOT.joinpath("sparklog").rglob("*.py"), ROOT / "pyspark_sparklog.py"])


def test_the_table_names_every_package() -> None:
    table = rules()
    assert "sparklog.errors" in table and "sparklog.protocol" in table
    for path in _modules():
        _owner(_module_name(path), table)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layering(path: Path) -> None:
    table = rules()
    module = _module_name(path)
    owner = _owner(module, table)
    allowed, third_party = table[owner]
    wrong = []
    for name in sorted(_runtime_imports(ast.parse(path.read_text()), module)):
        top = name.split(".")[0]
        if top in ("sparklog", "pyspark_sparklog"):
            target = _owner(name, table)
            # the root package (its version) is everyone's
            if target not in (owner, "sparklog") and target not in allowed:
                wrong.append(f"{name} (in {target})")
        elif top in RESTRICTED and top not in third_party:
            wrong.append(name)
    assert wrong == [], (f"{module} ({owner}) imports what {DOC.name} does not allow it: "
                         f"{', '.join(wrong)}")
