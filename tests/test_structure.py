"""Checks anyone can run on the code itself: one layer per folder (the pure packages and the model
import neither Ray nor the layers above them; no layer imports one above it), no test-only
machinery in the product, no import cycle among the pipelines modules (imports inside functions
included), no file over 400 lines (what it does with what it reads from storage: test_storage_rules.py)."""

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
    return {m for m in all_imports(path) if m in modules and m != module_name(path)}


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


# The layers of pipelines/, bottom up; a module may import its own layer and those below it.
LAYERS = (
    ("pipelines.errors", "pipelines.console", "pipelines.native_stderr", "pipelines.storage", "pipelines.config"),
    (
        "pipelines.prep",
        "pipelines.train",
        "pipelines.finetuning",
        "pipelines.report",
        "pipelines.inference",
        "pipelines.tracking",
    ),
    ("pipelines.export",),
    ("pipelines.rundir",),
    ("pipelines.stages",),
    ("pipelines.cli", "pipelines.full_run"),
)
PURE = (
    "albert_model",
    "pipelines.prep",
    "pipelines.train",
    "pipelines.finetuning",
    "pipelines.report",
    "pipelines.inference",
    "pipelines.tracking",
    "pipelines.export",
)


def all_imports(path: Path) -> set[str]:
    """Every module a file imports anywhere in it, absolute (project and third-party alike)."""
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
    return found


def layer_of(module: str) -> int | None:
    for i, layer in enumerate(LAYERS):
        if any(module == top or module.startswith(top + ".") for top in layer):
            return i
    return None


def layer_violations(root: Path) -> list[str]:
    """`file imports module` for each import of Ray from a pure package or of a higher layer."""
    found = []
    for package in ("pipelines", "albert_model"):
        for path in sorted((root / package).rglob("*.py")):
            name = module_name(path)
            pure = any(name == p or name.startswith(p + ".") for p in PURE)
            own = 0 if name.startswith("albert_model") else layer_of(name)
            for imported in sorted(all_imports(path)):
                if pure and (imported == "ray" or imported.startswith("ray.")):
                    found.append(f"{path.relative_to(root)} imports {imported}")
                target = layer_of(imported)
                if target is not None and (own is None or target > own):
                    found.append(f"{path.relative_to(root)} imports {imported}")
    return found


def test_every_pipelines_module_is_in_a_layer():
    unplaced = [
        module_name(p)
        for p in (ROOT / "pipelines").rglob("*.py")
        if module_name(p) != "pipelines" and layer_of(module_name(p)) is None
    ]
    assert unplaced == []


def test_no_layer_imports_one_above_it_and_the_pure_packages_import_no_ray():
    assert layer_violations(ROOT) == []


def test_the_layer_check_finds_a_violation(tmp_path, monkeypatch):
    """The check above could fail: Ray in a pure package, the run-directory layer from train/."""
    (tmp_path / "albert_model").mkdir()
    train = tmp_path / "pipelines" / "train"
    train.mkdir(parents=True)
    (train / "loop.py").write_text("import ray\n\ndef f():\n    from ..rundir.lifecycle import StageRun\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert layer_violations(tmp_path) == [
        "pipelines/train/loop.py imports pipelines.rundir.lifecycle",
        "pipelines/train/loop.py imports pipelines.rundir.lifecycle.StageRun",
        "pipelines/train/loop.py imports ray",
    ]


def test_the_command_line_and_the_data_workers_start_without_torch():
    """torch's import (~2 s on a 2-core machine) is paid only where a model runs: not by the command
    line nor by the vocab and data stages' Ray Data workers, which import the config (and so
    albert_model's config), nor by the task families' registry, against which every command checks
    its config; the model classes still import from albert_model on first use. A Tune
    trial's import chain (the families and their metrics) leaves out scikit-learn and scipy (1-2 s
    of each trial process's start; the metrics are numpy's, checked equal to theirs in test_metrics)."""
    import subprocess

    code = (
        "import sys; import pipelines.cli.command, pipelines.stages.vocab, pipelines.stages.data; "
        "import pipelines.finetuning.families.checks, pipelines.rundir.registry; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "from albert_model import AlbertForPreTraining; assert 'torch' in sys.modules; "
        "import albert_model; assert AlbertForPreTraining is albert_model.model.AlbertForPreTraining; "
        "import pipelines.finetuning.trial; "
        "found = {m.split('.')[0] for m in sys.modules} & {'sklearn', 'scipy'}; assert not found, found"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


TEST_WORDS = ("test-only", "tests only", "fault inject")


def env_keys(tree: ast.Module) -> list[str]:
    """The keys of os.environ.get(...), os.getenv(...), os.environ.setdefault(...) and os.environ[...]
    given as a string or a module-level name bound to one."""
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def key(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant):
            return str(node.value)
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    keys = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            if ast.unparse(node.func) in ("os.getenv", "os.environ.get", "os.environ.setdefault", "environ.get"):
                keys.append(key(node.args[0]))
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "environ"):
            keys.append(key(node.slice))
    return [k for k in keys if k is not None]


def machinery_in_product(root: Path) -> list[str]:
    """Product files (pipelines/, albert_model/) that describe test-only machinery or read an
    environment variable named for tests. Fault injection lives in tests/faults.py."""
    found = []
    for package in ("pipelines", "albert_model"):
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text()
            found += [f"{path.relative_to(root)}: {w!r}" for w in TEST_WORDS if w in text.lower()]
            found += [f"{path.relative_to(root)}: reads {k}" for k in env_keys(ast.parse(text)) if "TEST" in k.upper()]
    return found


def test_no_product_module_carries_test_machinery():
    assert machinery_in_product(ROOT) == []


def test_the_test_machinery_check_finds_it(tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "albert_model").mkdir()
    source = 'import os\nFAULT = "X_TEST_FAIL_AT"\nSTEP = int(os.environ.get(FAULT, 0))\n'
    (tmp_path / "pipelines" / "a.py").write_text(source)
    (tmp_path / "albert_model" / "b.py").write_text('def f(loss_factor=None):\n    """Test-only: scales the loss."""\n')
    assert machinery_in_product(tmp_path) == [
        "pipelines/a.py: reads X_TEST_FAIL_AT",
        "albert_model/b.py: 'test-only'",
    ]
