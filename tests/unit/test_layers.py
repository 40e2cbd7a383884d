"""The package's folders are its layers, and no module imports from a layer above its own (in-function imports
included): model < pure < effects < commands < adapters < acceptance (the pytest-bdd adapter)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["model", "pure", "effects", "commands", "adapters", "acceptance"]


def layer_of(module: str) -> int:
    if module == "clusterbook":
        return -1  # the package's own __init__ (its version, where its data lies): below every layer
    parts = module.split(".")
    assert parts[0] == "clusterbook" and len(parts) > 1 and parts[1] in LAYERS, f"{module} is in no layer folder"
    return LAYERS.index(parts[1])


def imports_of(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("clusterbook"):
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append((node.lineno, "relative"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("clusterbook")]
    return found


NODE = ROOT / "clusterbook/node"  # programs that run on the nodes: they stand alone, and no layer imports them
MODULES = sorted(p for p in (ROOT / "clusterbook").rglob("*.py") if p.parent not in (ROOT / "clusterbook", NODE))


@pytest.mark.parametrize("path", sorted(NODE.glob("*.py")), ids=lambda p: p.name)
def test_a_node_program_stands_alone(path):
    """A node gets the one file: it imports only Python's standard library, never clusterbook."""
    assert [m for _, m in imports_of(path)] == []
    users = [p.name for p in MODULES if any(m.startswith("clusterbook.node") for _, m in imports_of(p))]
    assert users == [], f"{users} import a node program: read it as a file (artifacts.node_program)"


def test_every_module_is_in_a_layer_folder():
    loose = [p.name for p in (ROOT / "clusterbook").glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules outside the layer folders: {loose}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT / "clusterbook")))
def test_no_import_from_a_higher_layer(path):
    own = layer_of(".".join(path.relative_to(ROOT).with_suffix("").parts))
    for line, module in imports_of(path):
        assert module != "relative", f"{path.name}:{line}: use absolute imports, so the layer is visible"
        assert layer_of(module) <= own, \
            f"{path.name}:{line} ({LAYERS[own]}) imports {module} ({LAYERS[layer_of(module)]})"


def module_graph() -> dict[str, set[str]]:
    """Each clusterbook module and the clusterbook modules it imports (`from pkg import submodule` names the
    submodule, not the package)."""
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "clusterbook").rglob("*.py")}
    graph = {}
    for name, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("clusterbook"):
                subs = {f"{node.module}.{a.name}" for a in node.names} & files.keys()
                deps |= subs | ({node.module} if len(subs) < len(node.names) else set())
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[name] = (deps & files.keys()) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, out = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                out.append(sorted([v, *component]))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert cycles(module_graph()) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]  # the check can fail


def test_imports_live_at_the_top_except_the_heavy_few_each_with_its_reason():
    """Issue 34: an import inside a function only for a heavy third-party module (matplotlib, MkDocs, gguf, httpx,
    pytest-bdd) that most tasks never need, each marked with why; at most 20."""
    lazy = []
    for path in MODULES:
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        module = inner.module if isinstance(inner, ast.ImportFrom) else inner.names[0].name
                        lazy.append((path.name, inner.lineno, module, lines[inner.lineno - 1]))
    assert len(lazy) <= 20, lazy
    heavy = {"matplotlib", "mkdocs", "gguf", "httpx", "pytest_bdd", "pytest"}
    assert all(m.split(".")[0] in heavy for _, _, m, _ in lazy), lazy
    reasons = [(name, line) for name, line, _, text in lazy if "lazy" not in text]
    grouped = {(name, line - 1) for name, line, _, text in lazy}  # a group's first line carries the reason
    assert [(n, ln) for n, ln in reasons if (n, ln - 1) not in grouped and (n, ln - 2) not in grouped] == []


def test_no_lazy_command_name_is_a_module_name():
    """tasks.py reaches commands by name (commands/__init__.py); a name that is also a module's would turn into that
    module once anything imports it (invoke preflight failed so in a process that had run invoke demo)."""
    from clusterbook.commands import WHERE
    modules = {p.stem for p in (ROOT / "clusterbook/commands").glob("*.py")}
    assert sorted(set(WHERE) & modules) == []
