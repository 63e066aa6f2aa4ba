"""The layering of docs/architecture.md holds: every module imports only the sparklog
packages and the restricted third-party libraries its package's row allows, and no module
imports itself back through others.

The rules are read from the table in docs/architecture.md, so the document and the check
cannot drift apart. Imports under ``if TYPE_CHECKING:`` count too: a type-only import is a
dependency all the same (a part that needs its owner's type names a small ``Protocol``
instead). A module belongs to the longest package path of the table that contains it.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
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


def _imports(tree: ast.Module, module: str) -> set[str]:
    """Absolute names of what the module imports (type-only imports included)."""
    found: set[str] = set()
    for node in ast.walk(tree):
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
    for name in sorted(_imports(ast.parse(path.read_text()), module)):
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


def _module_graph() -> dict[str, set[str]]:
    """module -> the sparklog modules it imports (type-only imports included)."""
    modules = {_module_name(path): path for path in _modules()}
    return {module: {name for name in _imports(ast.parse(path.read_text()), module)
                     if name in modules and name != module}
            for module, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_back() -> None:
    assert _cycles(_module_graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


HANDLERS = ROOT / "sparklog" / "broker" / "api"
WHICH_BROKER = re.compile(r"zookeeper_connect|has_peers|\.store\b|LocalStore|ClusterSession|"
                          r"inter_broker|broker\.cluster\b")
"""What a handler would ask to tell a single node from a cluster."""


@pytest.mark.parametrize("path", sorted(HANDLERS.glob("*.py")), ids=lambda p: p.name)
def test_the_api_package_holds_handlers_that_never_ask_which_broker_they_run_in(
        path: Path) -> None:
    text = path.read_text()
    assert path.name == "__init__.py" or "@handles(" in text, f"{path.name} serves no API"
    assert WHICH_BROKER.findall(text) == [], path.name


HEAVY_FOR_EVERY_BATCH = ("pyarrow.compute", "fastavro", "httpx", "authlib", "deltalake",
                         "kazoo", "confluent_kafka.schema_registry", "antlr4",
                         "proto_schema_parser")
"""What the modules Spark loads for every micro-batch must not import: Spark builds a
streaming writer (and its options) in two fresh Python processes per micro-batch, so each
import here is paid twice per batch (``pyarrow.compute`` alone is about 40 ms)."""


def test_what_every_micro_batch_imports_stays_light() -> None:
    code = ("import sys, pyspark_sparklog, sparklog.datasource.write.writer, "
            "sparklog.datasource.read.stream_reader; print('\\n'.join(sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=ROOT).stdout.split()
    assert [m for m in loaded if m.startswith(HEAVY_FOR_EVERY_BATCH)] == []
