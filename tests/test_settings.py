"""fa_cli/settings.py is the one reader of fa's environment: no other module reads a named
variable (os.environ passed on whole to a child process is no reading). Read from the sources."""
import ast
import subprocess
import sys

from helpers import ROOT

from fa_cli import settings


def environment_reads(tree: ast.AST) -> list[int]:
    """Lines that read a named variable: os.environ.get(...), os.getenv(...), os.environ[...],
    "NAME" in os.environ."""
    def is_environ(node):
        return isinstance(node, ast.Attribute) and node.attr == "environ"
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                (node.func.attr in ("get", "setdefault", "pop") and is_environ(node.func.value))
                or node.func.attr == "getenv"):
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            lines.append(node.lineno)
    return lines


def test_only_settings_reads_the_environment():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "fa_cli").rglob("*.py"))
             if p.name != "settings.py" for n in environment_reads(ast.parse(p.read_text()))]
    assert not found, "read a variable through fa_cli/settings.py instead: " + ", ".join(found)


def test_the_check_sees_each_form():
    code = 'import os\na = os.environ.get("X")\nb = os.getenv("Y")\nc = os.environ["Z"]\nd = "W" in os.environ\n' \
           'e = {**os.environ, "T": "1"}\n'
    assert environment_reads(ast.parse(code)) == [2, 3, 4, 5]


def test_settings_are_read_when_asked(monkeypatch):
    monkeypatch.setenv("NVCC", "/opt/nvcc-12")
    monkeypatch.delenv("CXX", raising=False)
    assert settings.compiler_command("nvcc") == "/opt/nvcc-12" and settings.compiler_command("g++") == "g++"
    monkeypatch.setenv("FA_CACHE", "")
    assert settings.cache_override() is None
    monkeypatch.setenv("FA_TIMING", "0")
    assert not settings.timing_asked()
    code = "import os; os.environ['FA_DEBUG'] = '1'; from fa_cli import settings; print(settings.debug())"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "True"
