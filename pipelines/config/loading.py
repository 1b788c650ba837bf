"""The config from YAML and the command line: `--config FILE`, then `section.key=value` overrides
in order (a mapping value such as tune.space replaced whole), every key and value checked
(pydantic, strict) with errors that name them, the YAML read bounded (bounded_yaml.py); `--help`
lists every key with its default and meaning; the resolved config is written back as YAML."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

import yaml

from ..errors import ConfigError
from .base import build_section, config_to_dict, field_docs, shown, unknown_key
from .bounded_yaml import MAX_CONFIG_BYTES, ConfigDumper, YamlRefused, load_yaml
from .tree import SECTIONS, SETTINGS, Config


def _check_section_keys(cls: type, name: str, value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}config section {name!r} must be a mapping of its keys, got {shown(value)}")
    known, subsections = {f.name for f in dataclasses.fields(cls)}, cls.SUBSECTIONS
    for key, inner in value.items():
        if key not in known:
            raise unknown_key(f"{name}.{key}", cls, where)
        if key in subsections and inner is not None:
            _check_section_keys(subsections[key], f"{name}.{key}", inner, where)


def _check_keys(raw: dict[Any, Any], where: str = "") -> None:
    """Every key known, before any value is checked (an unknown key is the likelier mistake)."""
    for name, value in raw.items():
        if name not in {f.name for f in dataclasses.fields(Config)}:
            raise unknown_key(str(name), Config, where)
        if name in SECTIONS and value is not None:
            _check_section_keys(SECTIONS[name], name, value, where)


def _merge(base: dict[str, Any], update: dict[str, Any], cls: type) -> dict[str, Any]:
    """`update` over section `cls`'s `base`: a subsection (train.health) merged key by key, any other
    key replaced whole, a mapping value such as tune.space included."""
    merged = dict(base)
    for key, value in update.items():
        old, sub = merged.get(key), cls.SUBSECTIONS.get(key)
        merged[key] = _merge(old, value, sub) if sub and isinstance(old, dict) and isinstance(value, dict) else value
    return merged


def _read_yaml(path: str) -> dict[Any, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read config file {path!r}: {e.strerror}") from e
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path!r} is larger than {MAX_CONFIG_BYTES} bytes: not a config file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(f"config file {path!r} is not UTF-8 text (line {line}, byte {e.start}: {e.reason})") from e
    try:
        raw = load_yaml(text)
    except YamlRefused as e:
        raise ConfigError(f"config file {path!r}: {e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path!r} is not valid YAML: {' '.join(str(e).split())}") from e
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError(f"config file {path!r} must be a mapping of sections, got {type(raw).__name__}")
    return raw or {}


BASE = "base"
"""A config file's key naming another config file it builds on (relative to its own folder)."""
MAX_BASES = 8


def _update(raw: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`update`'s sections over `raw`'s, key by key (`_merge`); run_dir replaced."""
    merged = dict(raw)
    for name, value in update.items():
        merged[name] = _merge(raw.get(name) or {}, value or {}, SECTIONS[name]) if name in SECTIONS else value
    return merged


def _read_config_file(path: str, chain: tuple[str, ...] = ()) -> dict[str, Any]:
    """A config file with the file it names as `base` (and that one's, ...) under it: each section
    merged key by key, a subsection (train.health) too, any other value (tune.space) replaced whole,
    as overrides are merged."""
    raw = _read_yaml(path)
    base = raw.pop(BASE, None)
    _check_keys(raw, where=f"{path}: ")
    if base is None:
        return raw
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: base={base!r}: the path of a config file this one builds on")
    base_path = os.path.normpath(os.path.join(os.path.dirname(path), os.path.expanduser(base)))
    if os.path.realpath(base_path) in chain + (os.path.realpath(path),):
        files = (*chain, os.path.realpath(path), os.path.realpath(base_path))  # the loop, file by file
        raise ConfigError(f"{path}: base={base!r} builds on itself ({' -> '.join(files)})")
    if len(chain) >= MAX_BASES:
        raise ConfigError(f"{path}: base={base!r}: more than {MAX_BASES} config files built on each other")
    if not os.path.exists(base_path):
        raise ConfigError(f"{path}: base={base!r}: {base_path} does not exist (a path relative to {path}'s folder)")
    return _update(_read_config_file(base_path, (*chain, os.path.realpath(path))), raw)


def _parse_override(text: str) -> dict[str, Any]:
    """`section.key=value` (or `run_dir=value`) as the nested mapping a YAML file would hold."""
    key, sep, value_text = text.partition("=")
    if not sep:
        raise ConfigError(f"malformed override {shown(text)}: expected section.key=value")
    try:  # `~` is YAML's null, but on a command line it means the home folder
        value = value_text if value_text == "~" or value_text.startswith("~/") else load_yaml(value_text)
    except YamlRefused as e:
        raise ConfigError(f"override {shown(text)}: {e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"override {shown(text)}: value is not valid YAML: {' '.join(str(e).split())}") from e
    section, dot, name = key.partition(".")
    if dot and section not in SECTIONS:
        raise unknown_key(key, Config)
    if not dot and section in SECTIONS:
        raise ConfigError(f"override {shown(text)}: {section} is a section; set its keys as {section}.KEY=VALUE")
    if not dot:
        return {section: value}
    nested: Any = value
    for part in reversed(name.split(".")):  # train.health.max_rollbacks -> {train: {health: {max_rollbacks: v}}}
        nested = {part: nested}
    return {section: nested}


def load_config(config_file: str | Sequence[str] | None = None, overrides: Sequence[str] = ()) -> Config:
    """The config from optional YAML files (one path, or several, each over the ones before it, as a
    file over its `base`), then `section.key=value` overrides in order, validated; a bad file, key or
    value raises ConfigError naming it."""
    files = [config_file] if isinstance(config_file, str) else list(config_file or ())
    raw: dict[str, Any] = {}
    for path in files:
        raw = _update(raw, _read_config_file(path))
    updates = [_parse_override(text) for text in overrides]
    for update in updates:
        _check_keys(update)
    for update in updates:
        raw = _update(raw, update)
    values = {
        name: build_section(SECTIONS[name], value or {}) if name in SECTIONS else value for name, value in raw.items()
    }
    return build_section(Config, values)


def dump_yaml(config: Config) -> str:
    """The resolved config as YAML that `load_config` reads back to an equal config."""
    return yaml.dump(config_to_dict(config), Dumper=ConfigDumper, sort_keys=False)


@dataclasses.dataclass(frozen=True)
class KeyDoc:
    """One config key as `--help` and docs/config.md (pipelines/config/reference.py) show it."""

    key: str
    type: str
    default: Any
    doc: str
    setting: str | None
    """Why the key never changes a result (SETTINGS), or None when it does."""


def documented_sections() -> list[tuple[type, list[KeyDoc]]]:
    """The root and every section and subsection in the tree's order, each with its own keys."""
    documented = []
    for cls in (Config, *(s for section in SECTIONS.values() for s in (section, *section.SUBSECTIONS.values()))):
        defaults, docs = config_to_dict(cls()), field_docs(cls)
        nested = SECTIONS if cls is Config else cls.SUBSECTIONS
        keys = []
        for f in dataclasses.fields(cls):
            if f.name not in nested:
                key = cls.key(f.name)
                setting = SETTINGS.get(key, SETTINGS.get(cls.SECTION))
                keys.append(KeyDoc(key, str(f.type), defaults[f.name], docs[f.name], setting))
        documented.append((cls, keys))
    return documented


def _help_epilog() -> str:
    lines = [
        "config keys (in --config FILE, or as section.key=value; lists as [a,b], unset as null).",
        "[setting]: never changes a result, so changing it never makes a stage's output stale:",
    ]
    for _, keys in documented_sections():
        for k in keys:
            tag = " [setting]" if k.setting else ""
            lines.append(f"  {k.key} (default: {json.dumps(k.default)}){tag}: {k.doc}")
    return "\n".join(lines)


def build_arg_parser(description: str) -> argparse.ArgumentParser:
    """`--config FILE` plus positional `section.key=value` overrides; `--help` lists every key."""
    parser = argparse.ArgumentParser(
        description=description, epilog=_help_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        action="append",
        help="YAML file with any subset of the config sections; given again, each file over the ones before",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="section.key=value",
        help="override one config key; applied in order after --config",
    )
    return parser


def parse_cli(argv: Sequence[str] | None, parser: argparse.ArgumentParser) -> tuple[Config, argparse.Namespace]:
    """The config and the parsed arguments from the command line (sys.argv when `argv` is None).
    Bad flags exit with argparse's usage message (status 2); a bad config raises ConfigError."""
    args = parser.parse_intermixed_args(argv)
    return load_config(args.config, args.overrides), args


__all__ = ["KeyDoc", "build_arg_parser", "documented_sections", "dump_yaml", "load_config", "parse_cli"]
