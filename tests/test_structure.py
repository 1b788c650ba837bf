"""Checks anyone can run on the code itself: no import cycle among the pipelines modules (imports
inside functions included), no file over 400 lines, nothing unpickled."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipelines", "albert_model", "bench", "tests")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The project modules a file imports anywhere in it (`from x import y` counts x.y when that is a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in found if m in modules and m != name}


def import_graph(root: Path) -> dict[str, set[str]]:
    files = {module_name(p): p for p in (root / "pipelines").rglob("*.py")}
    return {name: imported_modules(path, set(files)) for name, path in files.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, str] = {}
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(trail[trail.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_no_import_cycle_among_pipelines_modules():
    assert find_cycles(import_graph(ROOT)) == []


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    """The check above could fail: two modules importing each other, one inside a function, are found."""
    package = tmp_path / "pipelines"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def f():\n    from .a import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert find_cycles(import_graph(tmp_path)) == [["pipelines.a", "pipelines.b", "pipelines.a"]]


def test_no_file_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert long == {}


def test_no_pickle_in_the_project():
    offenders = [
        str(p.relative_to(ROOT))
        for package in ("pipelines", "albert_model", "bench")
        for p in (ROOT / package).rglob("*.py")
        if any(s in p.read_text() for s in ("weights_only=False", "import pickle", "pickle.load"))
    ]
    assert offenders == []
