"""What the product does with what it reads from storage, checked in its code (issue #43): nothing
is unpickled but through the one restricted reader, and folders are deleted and moved only through
the contained-path primitive. Read from the syntax tree, so a comment or a string names nothing."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


UNPICKLER = "pipelines/train/dcp_reader.py"
"""The product's one unpickler: DCP's metadata through an allowlist of its classes, the values of
its shards with weights_only=True."""
UNPICKLER_USES = {
    "pickle",
    "pickle.Unpickler",
    "pickle.UnpicklingError",
    "torch.distributed.checkpoint.load",
    "torch.distributed.checkpoint.default_planner.DefaultLoadPlanner",
    "torch.distributed.checkpoint.filesystem.FileSystemReader",
}
PICKLE_MODULES = ("pickle", "_pickle", "cloudpickle", "ray.cloudpickle", "dill", "joblib")
UNPICKLING = {
    *(f"{m}.{f}" for m in PICKLE_MODULES for f in ("load", "loads", "Unpickler")),
    "pandas.read_pickle",
    "torch.jit.load",  # TorchScript: code
    # DCP's own reader and planner unpickle .metadata and the shards' values unrestricted
    "torch.distributed.checkpoint.load",
    "torch.distributed.checkpoint.load_state_dict",
    "torch.distributed.checkpoint.state_dict_loader.load",
    "torch.distributed.checkpoint.FileSystemReader",
    "torch.distributed.checkpoint.filesystem.FileSystemReader",
    "torch.distributed.checkpoint.DefaultLoadPlanner",
    "torch.distributed.checkpoint.default_planner.DefaultLoadPlanner",
    # Tuner.restore unpickles tuner.pkl and the experiment's state; Tuner.fit's ResultGrid each
    # failed trial's error.pkl; ExperimentAnalysis and Result.from_path the same from a folder
    "ray.tune.Tuner",
    "ray.tune.tuner.Tuner",
    "ray.tune.Tuner.restore",
    "ray.tune.ExperimentAnalysis",
    "ray.tune.analysis.ExperimentAnalysis",
    "ray.tune.Result.from_path",
    "ray.train.Result.from_path",
    "ray.train.torch.TorchTrainer.restore",
}
TORCH_LOADS = ("torch.load", "torch.serialization.load")
PICKLE_ERRORS = {"UnpicklingError", "PickleError"}
"""What `from pickle import ...` may bring in: the errors torch's restricted loader raises."""


def import_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> the absolute name it is bound to by an import anywhere in the module."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):  # `import a.b` binds a, itself
            names.update({alias.asname: alias.name for alias in node.names if alias.asname})
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def dotted(node: ast.AST, names: dict[str, str]) -> str | None:
    """`a.b.c` of a name or attribute chain, its first name resolved through the imports."""
    if isinstance(node, ast.Name):
        return names.get(node.id, node.id)
    if isinstance(node, ast.Attribute) and (base := dotted(node.value, names)) is not None:
        return f"{base}.{node.attr}"
    return None


def unpickling_sites(root: Path) -> list[str]:
    """`file:line: name` for each way of loading a pickle in the product (pipelines/, albert_model/),
    read from the code's syntax tree (a comment or a string names nothing): an import of a pickle
    module, a call of an unpickling function or class, torch.load without weights_only=True,
    numpy.load with allow_pickle=True. The restricted reader (UNPICKLER) may use what it needs."""
    found = []
    for package in ("pipelines", "albert_model"):
        for path in sorted((root / package).rglob("*.py")):
            where = str(path.relative_to(root))
            allowed = UNPICKLER_USES if where == UNPICKLER else set()
            tree = ast.parse(path.read_text())
            names = import_names(tree)
            calls = {id(node.func): node for node in ast.walk(tree) if isinstance(node, ast.Call)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and {a.name for a in node.names} <= PICKLE_ERRORS:
                        continue  # an exception class to catch a refusal with loads nothing
                    found += [
                        (where, node.lineno, f"import {m}") for m in modules if m in PICKLE_MODULES and m not in allowed
                    ]
                    continue
                name = dotted(node, names) if isinstance(node, ast.Name | ast.Attribute) else None
                if name is None or name in allowed:
                    continue
                call = calls.get(id(node))
                flag = {k.arg: getattr(k.value, "value", None) for k in call.keywords} if call else {}
                if name in TORCH_LOADS:
                    safe = flag.get("weights_only") is True
                else:
                    safe = name not in UNPICKLING and not (name == "numpy.load" and flag.get("allow_pickle"))
                if not safe:
                    found.append((where, node.lineno, name))
    return [f"{where}:{line}: {name}" for where, line, name in sorted(found)]


def test_nothing_from_storage_is_unpickled():
    assert unpickling_sites(ROOT) == []


def test_the_unpickling_check_finds_each_way_in(tmp_path):
    """The check above could fail, and reads code, not text: each way in is found, however it is
    imported; a comment, a string, torch.load(weights_only=True), importing the error a refusal
    raises and the restricted reader's own uses are not."""
    (tmp_path / "albert_model").mkdir()
    (tmp_path / "pipelines" / "train").mkdir(parents=True)
    (tmp_path / "pipelines" / "a.py").write_text(
        "import pickle\n"
        "import torch\n"
        "import torch.distributed.checkpoint as dcp\n"
        "import ray.tune\n"
        "from ray import tune\n"
        "from ray.tune import Tuner as T\n"
        "# Tuner.restore(path) and pickle.load(f) in a comment\n"
        "NOTE = 'torch.load(f) in a string'\n"
        "def f(path, trainable, state):\n"
        "    ray.tune.Tuner.restore(path, trainable)\n"
        "    tune.Tuner.restore(path, trainable)\n"
        "    T.restore(path, trainable)\n"
        "    torch.load(path)\n"
        "    torch.load(path, weights_only=False)\n"
        "    torch.load(path, map_location='cpu', weights_only=True)\n"
        "    dcp.load(state, checkpoint_id=path)\n"
        "    return pickle.loads(path), torch.load\n"
        "from pickle import UnpicklingError\n"
        "from pickle import UnpicklingError, Unpickler\n"
    )
    (tmp_path / "pipelines" / "train" / "dcp_reader.py").write_text(
        "import pickle\n"
        "import torch.distributed.checkpoint as dcp\n"
        "class U(pickle.Unpickler):\n"
        "    pass\n"
        "def g(state, f):\n"
        "    dcp.load(state, storage_reader=None)\n"
        "    return pickle.load(f)\n"
    )
    assert unpickling_sites(tmp_path) == [
        "pipelines/a.py:1: import pickle",
        "pipelines/a.py:10: ray.tune.Tuner",
        "pipelines/a.py:10: ray.tune.Tuner.restore",
        "pipelines/a.py:11: ray.tune.Tuner",
        "pipelines/a.py:11: ray.tune.Tuner.restore",
        "pipelines/a.py:12: ray.tune.Tuner",
        "pipelines/a.py:12: ray.tune.Tuner.restore",
        "pipelines/a.py:13: torch.load",
        "pipelines/a.py:14: torch.load",
        "pipelines/a.py:16: torch.distributed.checkpoint.load",
        "pipelines/a.py:17: pickle.loads",
        "pipelines/a.py:17: torch.load",
        "pipelines/a.py:19: import pickle",
        "pipelines/train/dcp_reader.py:7: pickle.load",
    ]


def test_folders_are_deleted_and_moved_only_through_the_contained_primitive():
    """storage.delete_tree and storage.move_tree follow the path they are given: every delete and
    move of the product's folders goes through pipelines/storage/contained.py, which walks to the
    path without following links (issue #43), so only it calls them."""
    callers = []
    for package in ("pipelines", "albert_model"):
        for path in sorted((ROOT / package).rglob("*.py")):
            where = str(path.relative_to(ROOT))
            if where in ("pipelines/storage/__init__.py", "pipelines/storage/contained.py"):
                continue
            tree = ast.parse(path.read_text())
            names = import_names(tree)
            for node in ast.walk(tree):
                name = dotted(node, names) if isinstance(node, ast.Name | ast.Attribute) else None
                if name and name.rpartition(".")[2] in ("delete_tree", "move_tree") and "storage" in name:
                    callers.append(f"{where}:{node.lineno}: {name}")
    assert callers == []
