"""A task family is one folder and one registry line (docs/architecture.md): outside its folder
(pipelines/finetuning/families/<name>/) and the registry (families/__init__.py), no product module
(pipelines/, albert_model/) names a family, so everything else derives from the registry.

Read from each module's syntax tree, names being the registry's. A module names a family with a
string equal to its name (`"regression"`; prose that mentions one, a docstring or an error
message, names nothing) or an identifier equal to it in any case (`MULTI_LABEL`, a function's
`regression=` argument, an import of `families.question_answering`). transformers' vocabulary
is not ours: its `problem_type` values are "regression", "single_label_classification" and
"multi_label_classification", so a string compared with, given as or stored under something
called `problem_type` (or `problem`) is transformers' and names nothing; the longer two are no
family's name anyway. The allowlist below names what may still name families, and why."""

import ast
from pathlib import Path

from pipelines.config import FinetuneSection
from pipelines.config.glue import GLUE_TASKS
from pipelines.finetuning.families import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
FAMILIES_DIR = "pipelines/finetuning/families"
REGISTRY = f"{FAMILIES_DIR}/__init__.py"

CONFIG_VALUES = {
    # Config values, as a user's YAML writes them: finetune.task's default (a default lives only in
    # the config tree) and GLUE's presets, which set finetune.task per task. The config layer lies
    # below the families, so these are strings; every entry point checks them against the registry
    # (families/checks.py), and test_config_values_name_registered_families below does too.
    "pipelines/config/tuning.py": {"classification"},
    "pipelines/config/glue.py": {"classification", "regression"},
}


def is_problem_type(node: ast.AST) -> bool:
    """A name, attribute, subscript or string of transformers' `problem_type` (or a local `problem`)."""
    if isinstance(node, ast.Constant):
        return node.value == "problem_type"
    text = ast.unparse(node)
    return text.endswith(("problem_type", "problem")) or "'problem_type'" in text or '"problem_type"' in text


def transformers_strings(tree: ast.AST) -> set[int]:
    """The ids of the string nodes that are transformers' problem_type values, not family names."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(is_problem_type(n) for n in (node.left, *node.comparators)):
            found += [node.left, *node.comparators]
        elif isinstance(node, ast.keyword) and node.arg == "problem_type":
            found.append(node.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(is_problem_type(t) for t in targets) and node.value is not None:
                found += list(ast.walk(node.value))
        elif isinstance(node, ast.Dict):
            found += [v for k, v in zip(node.keys, node.values) if k is not None and is_problem_type(k)]
    return {id(n) for n in found}


def identifiers(node: ast.AST) -> list[str]:
    """The identifiers a node binds or uses (module paths split at their dots)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword):
        return [node.arg] if node.arg else []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.alias):
        return [*node.name.split("."), *([node.asname] if node.asname else [])]
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    return []


def named_families(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, family) for each string or identifier of `source` that names a family in `names`."""
    tree = ast.parse(source)
    theirs = transformers_strings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in names and id(node) not in theirs:
                found.append((node.lineno, node.value))
        else:
            found += [(getattr(node, "lineno", 0), i.lower()) for i in identifiers(node) if i.lower() in names]
    return sorted(set(found))


def naming_modules(root: Path, names: set[str]) -> dict[str, list[tuple[int, str]]]:
    """Product module -> where it names a family outside that family's folder and the registry."""
    found = {}
    for package in ("pipelines", "albert_model"):
        for path in sorted((root / package).rglob("*.py")):
            where = str(path.relative_to(root))
            if where == REGISTRY:
                continue
            own = Path(where).relative_to(FAMILIES_DIR).parts[0] if where.startswith(FAMILIES_DIR + "/") else None
            allowed = CONFIG_VALUES.get(where, set()) | {own}
            named = [(line, name) for line, name in named_families(path.read_text(), names) if name not in allowed]
            if named:
                found[where] = named
    return found


def test_outside_its_folder_and_the_registry_no_product_module_names_a_family():
    assert naming_modules(ROOT, set(FAMILIES)) == {}


def test_config_values_name_registered_families():
    assert FinetuneSection().task in FAMILIES
    assert {preset.task for preset in GLUE_TASKS.values()} <= set(FAMILIES)


def test_the_check_finds_a_family_named_and_leaves_transformers_vocabulary(tmp_path):
    """The check above could fail: strings and identifiers that name families are found, wherever in
    a module; prose, transformers' problem_type values and a family's own folder are not."""
    source = '''"""Scores regression and multi_label (prose names nothing)."""
from ..finetuning.families.question_answering.features import windows
MULTI_LABEL = 3
KINDS = ("classification", "regression_like")


def score(kind, config, regression=False):
    if kind == "token_classification":
        raise ValueError(f"finetune.task={kind}: not multiple_choice")
    if config.get("problem_type") == "regression" or config.problem_type in ("multi_label_classification",):
        return config.multiple_choice
    return save(problem_type="regression")
'''
    assert named_families(source, set(FAMILIES)) == [
        (2, "question_answering"),
        (3, "multi_label"),
        (4, "classification"),
        (7, "regression"),
        (8, "token_classification"),
        (11, "multiple_choice"),
    ]
    package = tmp_path / "pipelines" / "finetuning" / "families"
    (package / "regression").mkdir(parents=True)
    (tmp_path / "albert_model").mkdir()
    (package / "regression" / "training.py").write_text('NAME = "regression"\nOTHER = "classification"\n')
    (package / "__init__.py").write_text("from . import regression, classification\n")
    assert naming_modules(tmp_path, set(FAMILIES)) == {
        f"{FAMILIES_DIR}/regression/training.py": [(2, "classification")]
    }
