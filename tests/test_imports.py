"""fa_cli's modules import each other without a cycle, and every such import is at the top of
its module: read from the sources (ast), imports inside functions and classes included."""
import ast

from helpers import ROOT

PACKAGE = ROOT / "fa_cli"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py"))

# Function-level imports of fa_cli modules that are meant, and why.
LOCAL_IMPORTS_ALLOWED = {
    # A program of its own (`python fa_cli/torch_program.py IN OUT`, fa's --program torch), never
    # imported by fa: it imports numpy, torch and fa_cli's format after checking its arguments.
    "torch_program": "a standalone program",
}


def imported_modules(node: ast.AST, module: str) -> set[str]:
    """The fa_cli modules an import statement names: `from . import a, b`, `from .a import x`,
    `from fa_cli.a import x`, `import fa_cli.a`."""
    found = set()
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level == 1 or (node.level == 0 and (base == "fa_cli" or base.startswith("fa_cli."))):
            base = base.removeprefix("fa_cli").lstrip(".") if node.level == 0 else base
            if base:
                found.add(base.split(".")[0])
            else:
                found |= {a.name for a in node.names if a.name in MODULES}
        assert node.level <= 1, f"fa_cli/{module}.py: a relative import beyond the package"
    elif isinstance(node, ast.Import):
        found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("fa_cli.")}
    return found & set(MODULES)


def graph() -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """Each module's imports of fa_cli modules, and its imports that are not at module level."""
    edges, local = {}, {}
    for module in MODULES:
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        top = set(map(id, tree.body))
        edges[module], local[module] = set(), []
        for node in ast.walk(tree):
            names = imported_modules(node, module)
            edges[module] |= names
            if names and id(node) not in top:
                local[module].append(f"fa_cli/{module}.py:{node.lineno} imports {', '.join(sorted(names))}")
    return edges, local


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        path.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_the_graph_is_read():
    edges, _ = graph()
    assert "records" in edges["bench"] and "judge" in edges["cli"] and "reference" in edges["generate"]
    assert edges["errors"] == set()


def test_no_import_cycle():
    edges, _ = graph()
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_are_at_module_level():
    _, local = graph()
    found = [line for m, lines in local.items() if m not in LOCAL_IMPORTS_ALLOWED for line in lines]
    assert not found, "imports of fa_cli modules inside functions (move them to the top):\n" + "\n".join(found)
    assert set(LOCAL_IMPORTS_ALLOWED) <= set(MODULES)


def test_records_imports_nothing_that_uses_it():
    edges, _ = graph()
    users = {m for m, names in edges.items() if "records" in names}
    assert {"bench", "judge", "profile", "slurm", "sweep", "writeup", "cli"} <= users
    assert not edges["records"] & {"judge", "bench", "report", "compare", "writeup", "cli"}
