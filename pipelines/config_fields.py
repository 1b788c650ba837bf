"""The checks every config section runs in `__post_init__`, and the section names messages use.

Kept apart from config.py so sections can live in more than one file (config_finetune.py). The
name a section class is registered under is looked up in RunConfig when a message is built.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import types
import typing
from typing import Any

from .errors import ConfigError


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's attribute docstring (the string literal right under it), read from the source."""
    if "__field_docs__" in vars(cls):  # a generated class carries its docs
        return dict(vars(cls)["__field_docs__"])
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
    return {node.target.id: after.value.value.strip() for node, after in zip(body, body[1:])
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)}


@functools.cache
def _sections() -> dict[str, type]:
    """Section name -> dataclass, from RunConfig's dataclass-typed fields."""
    from .config import RunConfig  # at call time: config.py imports this module

    hints = typing.get_type_hints(RunConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(RunConfig) if dataclasses.is_dataclass(hints[f.name])}


def _section_name(cls: type) -> str:
    return next((name for name, section in _sections().items() if section is cls), "")


def _key(cls: type, name: str) -> str:
    return f"{_section_name(cls)}.{name}".lstrip(".")


def _require(obj: Any, name: str, ok: bool, why: str) -> None:
    if not ok:
        raise ConfigError(f"{_key(type(obj), name)}={getattr(obj, name)!r}: {why}")


def _conform(value: Any, tp: Any) -> tuple[bool, Any]:
    """Whether `value` fits type `tp`, and the value as stored (int widened to float, str put in a list)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return next(((True, v) for ok, v in (_conform(value, arg) for arg in args) if ok), (False, value))
    if origin is list:
        items = [value] if isinstance(value, args[0]) else value
        if not isinstance(items, (list, tuple)):
            return False, value
        conformed = [_conform(item, args[0]) for item in items]
        return all(ok for ok, _ in conformed), [v for _, v in conformed]
    if isinstance(value, bool) and tp is not bool:  # bool is an int subclass, but True is no size
        return False, value
    if tp is float and isinstance(value, int):
        return True, float(value)
    return isinstance(value, tp), value


def _check_types(obj: Any) -> None:
    hints = typing.get_type_hints(type(obj))  # evaluates the string annotations `__future__` leaves
    for f in dataclasses.fields(obj):
        ok, value = _conform(getattr(obj, f.name), hints[f.name])
        _require(obj, f.name, ok, f"must be {f.type}")
        setattr(obj, f.name, value)


def config_to_dict(config: Any) -> dict[str, Any]:
    """A config (or one section) as plain YAML/JSON-ready data, every key included."""
    return dataclasses.asdict(config)
