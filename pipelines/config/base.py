"""What every config section shares: strict types (pydantic), its key names, its checks, its docs.

A section is a pydantic dataclass in strict mode: a value of the wrong type is an error (no `1` for
a bool, no `3` for a path), an unknown key is an error, a float must be finite (no `.inf` or `.nan`
anywhere: one rule for every float setting, the search space's values included), and each field's
attribute docstring is its description (`--help`). Its semantic checks run in `__post_init__` through `Section.require`,
which names the key as it is written on the command line. A field that never changes a result says so
in its metadata (`field(..., metadata=setting(why))`): fingerprints leave it out and `--help` marks it.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import textwrap
from typing import Any, ClassVar

from pydantic import ConfigDict, ValidationError

from ..errors import ConfigError

STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)

SETTING = "setting"
"""The field metadata key saying why a key never changes a result (see `setting`)."""
NEUTRAL = "neutral"
"""The field metadata key holding the value at which a key computes what a config without it did (see `neutral_at`)."""


class Section:
    """Mixin of every config section (a pydantic dataclass with STRICT)."""

    SECTION: ClassVar[str] = ""
    """The section's name in the config tree ("" for the root)."""
    SUBSECTIONS: ClassVar[dict[str, type]] = {}
    """Fields that are sections of their own (train.health), set as SECTION.field.KEY."""

    @classmethod
    def key(cls, name: str) -> str:
        return f"{cls.SECTION}.{name}".lstrip(".")

    def require(self, name: str, ok: bool, why: str) -> None:
        if not ok:
            raise ConfigError(f"{self.key(name)}={shown(getattr(self, name))}: {why}")


def shown(value: Any, limit: int = 200) -> str:
    """`value` for an error line as the user writes it: null, true and false as YAML spells them,
    anything else its repr, cut short when long (a value can be a whole YAML list)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def unknown_key(key: str, cls: type, where: str = "") -> ConfigError:
    """The error of `key`, no key of section `cls`: the nearest key's name where one is close (a typo),
    then all of them."""
    fields = sorted(f.name for f in dataclasses.fields(cls))
    parts, depth = key.split("."), len(cls.SECTION.split(".")) if cls.SECTION else 0  # the part `cls` names
    near = difflib.get_close_matches(parts[depth], fields, n=1, cutoff=0.75) if depth < len(parts) else []
    guess = f"; did you mean {shown('.'.join([*parts[:depth], near[0], *parts[depth + 1 :]]))}?" if near else ";"
    names = ", ".join(fields)
    return ConfigError(f"{where}unknown config key {shown(key)}{guess} {cls.SECTION or 'the top level'} has: {names}")


def one_error(error: ValidationError, cls: type, values: dict[str, Any] | None = None, where: str = "") -> str:
    """The first problem pydantic found in section `cls` built from `values`, as one line naming
    the key: a check's own message, an unknown key with the section's keys, or the value and the
    type it must have."""
    first = error.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        return f"{where}{cause}"
    name = str(first["loc"][0]) if first["loc"] else ""
    if first["type"] == "unexpected_keyword_argument":
        return str(unknown_key(cls.key(name), cls, where))
    value = shown((values or {}).get(name, first.get("input")))
    if first["type"] == "finite_number":
        return f"{where}{cls.key(name)}={value}: must be a finite number"
    return f"{where}{cls.key(name)}={value}: must be {cls.__dataclass_fields__[name].type}"


def build_section(cls: type, values: dict[str, Any], where: str = "") -> Any:
    """`cls(**values)` (its subsections built from their mappings first), with pydantic's errors as
    one ConfigError naming the key."""
    subsections = getattr(cls, "SUBSECTIONS", {})
    values = {
        k: build_section(subsections[k], v, where) if k in subsections and isinstance(v, dict) else v
        for k, v in values.items()
    }
    try:
        return cls(**values)
    except ValidationError as e:
        raise ConfigError(one_error(e, cls, values, where)) from None


def field_docs(cls: type) -> dict[str, str]:
    """Each field's description (its attribute docstring, on one line)."""
    return {name: " ".join((info.description or "").split()) for name, info in cls.__pydantic_fields__.items()}


def setting(why: str) -> dict[str, str]:
    """Metadata of a field that never changes a result, `why` saying why (shown by --help and docs/config.md):
    fingerprints leave it out, so changing it never makes a stage stale. A subsection marked so is one
    setting as a whole."""
    return {SETTING: why}


def neutral_at(value: object) -> dict[str, object]:
    """Metadata of a key that, at `value`, computes exactly what configs did before the key existed
    (finetune.grad_accum_steps at 1: one micro-batch is the whole batch). At that value fingerprints
    leave it out, so adding the key left every earlier output current; any other value counts."""
    return {NEUTRAL: value}


def section_settings(cls: type) -> dict[str, str]:
    """key -> why, for every setting of section `cls` and of its subsections."""
    found = {}
    for f in dataclasses.fields(cls):
        if SETTING in f.metadata:
            found[cls.key(f.name)] = f.metadata[SETTING]
        elif f.name in cls.SUBSECTIONS:
            found.update(section_settings(cls.SUBSECTIONS[f.name]))
    return found


def attribute_docs(cls: type) -> dict[str, str]:
    """A plain dataclass's attribute docstrings (the string under `name: type = default`), on one line each:
    what pydantic's use_attribute_docstrings reads for a section."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    return {
        node.target.id: " ".join(doc.value.value.split())
        for node, doc in zip(body, body[1:])
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(doc, ast.Expr)
        and isinstance(doc.value, ast.Constant)
        and isinstance(doc.value.value, str)
    }


def config_to_dict(config: Any) -> dict[str, Any]:
    """A config (or one section) as plain YAML/JSON-ready data, every key included."""
    return dataclasses.asdict(config)


__all__ = [
    "SETTING",
    "STRICT",
    "Section",
    "attribute_docs",
    "build_section",
    "config_to_dict",
    "field_docs",
    "neutral_at",
    "one_error",
    "section_settings",
    "setting",
    "shown",
    "unknown_key",
]
