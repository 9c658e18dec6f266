"""Config files as YAML mappings: strict parsing with one-line errors naming the line and the fix
(the models' own errors: `hpcprof.core.models`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hpcprof.core.errors import UserError
from hpcprof.core.safe_yaml import SafeLoader, check_depth

#: Largest config file read (bytes).
MAX_BYTES = 4 << 20


class YamlValueError(yaml.YAMLError):
    """Valid YAML that does not mean what it looks like (an environment value YAML 1.1 reads
    as a number or a boolean): one line naming the line, the value and the quoting."""


#: the tags of plain scalars YAML 1.1 turns into something else than the text written
_NOT_TEXT = {"tag:yaml.org,2002:bool": "a boolean", "tag:yaml.org,2002:int": "the number",
             "tag:yaml.org,2002:float": "the number"}


def _pairs(node: yaml.MappingNode) -> Any:
    """(key text, value node) of a mapping node, merged mappings (`<<:`) included."""
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            for merged in value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]:
                if isinstance(merged, yaml.MappingNode):
                    yield from _pairs(merged)
        else:
            yield getattr(key_node, "value", "?"), value_node


class StrictLoader(SafeLoader):  # type: ignore[misc, valid-type]
    """yaml's safe loader that refuses duplicate keys and environment values (under `env:`, or a
    sweep's `env.NAME:` list) that YAML 1.1 reads as something else than their text (`0755` -> 493,
    `yes` -> true, `3.10` -> 3.1); `parse_yaml` checks the nesting depth first."""

    def _check_env_values(self, key: str, value_node: Any) -> None:
        if isinstance(value_node, yaml.MappingNode):
            items = list(_pairs(value_node))
        elif isinstance(value_node, yaml.SequenceNode) and key.startswith("env."):
            items = [(key.removeprefix("env."), v) for v in value_node.value]
        else:
            return
        for name, node in items:  # a plain scalar's style: None (Python loader) or "" (libyaml)
            if not isinstance(node, yaml.ScalarNode) or node.style or node.tag not in _NOT_TEXT:
                continue
            value = self.construct_object(node)
            if node.tag.endswith("bool") or str(value) != node.value:
                raise YamlValueError(f"line {node.start_mark.line + 1}: env {name}: YAML 1.1 reads {node.value} as "
                                     f"{_NOT_TEXT[node.tag]} {json_text(value)}; quote it to keep the text "
                                     f"({name}: \"{node.value}\")")

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        own = sum(1 for key_node, _ in node.value if key_node.tag != "tag:yaml.org,2002:merge")
        self.flatten_mapping(node)  # merge keys (`<<: *defaults`) as SafeLoader takes them
        merged = len(node.value) - own  # the merged entries come first; the mapping's own keys override them
        for position, (key_node, value_node) in enumerate(node.value):
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (list, dict)):
                raise yaml.YAMLError(f"line {key_node.start_mark.line + 1}: a key must be a plain value")
            if position < merged:
                continue
            if key in seen:
                raise yaml.YAMLError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}; "
                                     "keep one of them")
            seen.add(key)
            if isinstance(key, str) and (key == "env" or key.startswith("env.")):
                self._check_env_values(key, value_node)
        return super().construct_mapping(node, deep)


def json_text(value: Any) -> str:
    """A value as YAML/JSON writes it (true, 493, 3.1)."""
    return "true" if value is True else "false" if value is False else str(value)


def parse_yaml(text: str) -> Any:
    """Parse YAML with StrictLoader, once its nesting depth is checked."""
    check_depth(text)
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader


def load_yaml(path: Path, what: str) -> dict[str, Any]:
    """Load a YAML mapping: UTF-8 text, no duplicate keys, bounded size and depth; one-line
    errors for a missing file, bad encoding or bad syntax."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot read ({exc.strerror})") from None
    if len(raw) > MAX_BYTES:
        raise UserError(f"{what} {path}: larger than {MAX_BYTES >> 20} MiB; not a config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise UserError(f"{what} {path}: line {line}: not UTF-8 text; save the file as UTF-8") from None
    if "\x00" in text:
        raise UserError(f"{what} {path}: contains a NUL byte; not a text file")
    try:
        data = parse_yaml(text)
    except YamlValueError as exc:
        raise UserError(f"{what} {path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{what} {path}:{where} not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    except RecursionError:
        raise UserError(f"{what} {path}: nested too deeply") from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path}: expected a YAML mapping at the top level")
    return data
