"""fa_cli's modules import each other without a cycle, and every such import is at the top of
its module: read from the sources (ast), imports inside functions and classes included. A module
is named by its dotted path under fa_cli (cases.format); a sub-package by its folder (cases)."""
import ast

from helpers import ROOT

PACKAGE = ROOT / "fa_cli"


def module_name(path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
MODULES = sorted(FILES)

# Function-level imports of fa_cli modules that are meant, and why.
LOCAL_IMPORTS_ALLOWED = {
    # A program of its own (`python fa_cli/programs/torch_program.py IN OUT`, fa's --program torch),
    # never imported by fa: it imports numpy, torch and fa_cli's format after checking its arguments.
    "programs.torch_program": "a standalone program",
}


def imported_modules(node: ast.AST, module: str) -> set[str]:
    """The fa_cli modules an import statement names: `from . import a, b`, `from ..a.b import x`,
    `from fa_cli.a import x`, `import fa_cli.a`."""
    names: list[str] = []
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            here = module.split(".") if module else []
            package = here if FILES[module].name == "__init__.py" else here[:-1]
            assert node.level - 1 <= len(package), f"{FILES[module]}: a relative import beyond the package"
            base = ".".join(package[:len(package) - (node.level - 1)] + ([base] if base else []))
        elif base == "fa_cli" or base.startswith("fa_cli."):
            base = base.removeprefix("fa_cli").lstrip(".")
        else:
            return set()
        names = [f"{base}.{a.name}" if base else a.name for a in node.names]
        names = [n if n in FILES else base for n in names]  # a name of a module, else the module's
    elif isinstance(node, ast.Import):
        names = [a.name.removeprefix("fa_cli.") for a in node.names if a.name.startswith("fa_cli.")]
    return {n for n in names if n in FILES and n != module}


def graph() -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """Each module's imports of fa_cli modules, and its imports that are not at module level."""
    edges, local = {}, {}
    for module, path in FILES.items():
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body))
        edges[module], local[module] = set(), []
        for node in ast.walk(tree):
            names = imported_modules(node, module)
            edges[module] |= names
            if names and id(node) not in top:
                local[module].append(f"{path.relative_to(ROOT)}:{node.lineno} imports {', '.join(sorted(names))}")
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
    assert "report.records" in edges["measure.bench"] and "judge.reference" in edges["cases.generate"]
    assert "judge.verdict" in edges["commands.run"] and "cases.format" in edges["judge.verify"]
    assert edges["errors"] == set() and edges["cases"] == set()


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
    users = {m for m, names in edges.items() if "report.records" in names}
    assert {"measure.bench", "judge.verdict", "measure.profile", "programs.slurm", "measure.sweep",
            "report.writeup", "commands.run"} <= users
    assert not edges["report.records"] & {"judge.verdict", "measure.bench", "report.tables", "measure.compare",
                                          "report.writeup"}
    assert not any(m.startswith("commands") for m in edges["report.records"])


MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60  # def to its last line


def test_modules_and_functions_are_short():
    """Every module reads in one sitting: at most 450 lines, each function at most 60."""
    long = []
    for module, path in FILES.items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: "
                            f"{node.end_lineno - node.lineno + 1} lines")
    assert not long, "cut these (modules by job, functions by step):\n" + "\n".join(long)
