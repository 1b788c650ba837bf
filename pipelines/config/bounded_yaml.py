"""YAML as the config reads it (a file, a `key=value` override's value): safe types only, every
mapping key once, and bounded, so an alias bomb ("billion laughs"), a recursive alias or a
nesting too deep for Python is refused before anything is built from it; numbers as users write
them (`1e-5`), and written back so that text which reads as a number stays text."""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .base import shown

MAX_CONFIG_BYTES = 1 << 20
"""The largest config file (configs are a few KB; anything near this is not a config)."""
MAX_ALIASES = 100
"""The most aliases (`*name`, merges `<<: *name` included) in one document."""
MAX_VALUES = 10_000
"""The most values (scalars, lists, mappings) in one document with every alias written out."""
MAX_DEPTH = 64
"""The deepest nesting of lists and mappings, aliases written out."""

MERGE_TAG = "tag:yaml.org,2002:merge"
FLOAT_TAG = "tag:yaml.org,2002:float"

# YAML 1.1 (PyYAML) reads `1e-5`, `5E-4`, `1.5e5` and `-.5` as text: its floats need a dot and a signed
# exponent. These are YAML 1.2 core-schema floats (with 1.1's `_` digit separators); checked after
# 1.1's own resolvers, so what 1.1 already reads as a number (`1_000` an int, `.inf`) is unchanged.
CORE_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?$")


class YamlRefused(ValueError):
    """YAML that parses but that the config will not take; the message says why (no file name)."""


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader counting aliases and depth as it composes, refusing a key written twice in one
    mapping, and measuring the document with its aliases written out before constructing it."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.aliases = 0
        self.depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                line = self.peek_event().start_mark.line + 1
                raise YamlRefused(f"more than {MAX_ALIASES} YAML aliases (line {line}); write the values out")
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise YamlRefused(f"nested more than {MAX_DEPTH} levels deep (line {line})")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def compose_mapping_node(self, anchor: str | None) -> MappingNode:
        node = super().compose_mapping_node(anchor)
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node)  # `true` and `True`, `1` and `0x1` are one key
            line = key_node.start_mark.line + 1
            if key in seen:
                raise YamlRefused(f"key {shown(key)} appears twice in one mapping (line {seen[key]} and line {line})")
            seen[key] = line
        return node

    def get_single_node(self) -> Node | None:
        node = super().get_single_node()
        if node is not None:
            values, depth = _measure(node, {}, set())
            if values > MAX_VALUES:
                raise YamlRefused(
                    f"its YAML aliases expand to {values} values (at most {MAX_VALUES}); write the values out"
                )
            if depth > MAX_DEPTH:
                raise YamlRefused(f"its YAML aliases nest more than {MAX_DEPTH} levels deep")
        return node


class ConfigDumper(yaml.SafeDumper):
    """SafeDumper that quotes text the BoundedLoader would read as a number (`'1e5'`)."""


for _cls in (BoundedLoader, ConfigDumper):
    _cls.add_implicit_resolver(FLOAT_TAG, CORE_FLOAT, list("-+0123456789."))


def _measure(node: Node, memo: dict[int, tuple[int, int]], open_nodes: set[int]) -> tuple[int, int]:
    """(values, depth) of `node` with every alias written out; a node inside itself is refused."""
    if id(node) in memo:
        return memo[id(node)]
    if id(node) in open_nodes:
        raise YamlRefused(f"a YAML alias refers to a node that contains it (line {node.start_mark.line + 1})")
    if isinstance(node, SequenceNode):
        children: list[Node] = node.value
    elif isinstance(node, MappingNode):
        children = [n for pair in node.value for n in pair]
    else:
        children = []
    open_nodes.add(id(node))
    measured = [_measure(child, memo, open_nodes) for child in children]
    open_nodes.discard(id(node))
    memo[id(node)] = (1 + sum(v for v, _ in measured), 1 + max((d for _, d in measured), default=0))
    return memo[id(node)]


def load_yaml(text: str) -> Any:
    """`text` as Python values; YamlRefused (or yaml.YAMLError for bad syntax) says what is wrong."""
    if len(text) > MAX_CONFIG_BYTES:
        raise YamlRefused(f"{len(text)} characters of YAML (at most {MAX_CONFIG_BYTES})")
    return yaml.load(text, Loader=BoundedLoader)  # BoundedLoader is a SafeLoader


__all__ = ["ConfigDumper", "MAX_ALIASES", "MAX_CONFIG_BYTES", "MAX_DEPTH", "MAX_VALUES", "YamlRefused", "load_yaml"]
