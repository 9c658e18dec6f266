"""Config files as YAML mappings: strict parsing with one-line errors naming the line and the fix
(the models' own errors: `hpcprof.models`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hpcprof.errors import UserError

#: Deepest nesting of mappings and lists a config file may have.
MAX_DEPTH = 32
#: Largest config file read (bytes).
MAX_BYTES = 4 << 20
#: the most values a YAML file may expand to, its aliases counted as what they name
MAX_VALUES = 100_000


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


#: libyaml's parser and composer (PyYAML's wheels include it) where there is one: 15x faster than
#: the pure-Python ones on the site configs, which every command that lists or renders reads
_Loader: Any = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def check_depth(text: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH, and aliases that would expand to more than MAX_VALUES
    values (an alias bomb, merge keys `<<: [*a, *a]` over merged mappings: each alias counted as
    the size of what it names), from the parser's event stream before anything is built or
    expanded (no recursion: libyaml's composer recurses in C and crashes on ~100,000 levels,
    Python's would raise RecursionError)."""
    parser = _Loader(text)
    sizes: dict[str, int] = {}              # anchor -> values it expands to
    open_: list[tuple[str | None, int]] = [(None, 0)]     # (anchor, values so far) of each open node

    def add(count: int, event: Any) -> None:
        anchor, total = open_[-1]
        open_[-1] = (anchor, total + count)
        if total + count > MAX_VALUES:
            raise yaml.YAMLError(f"line {event.start_mark.line + 1}: its aliases expand to more than "
                                 f"{MAX_VALUES:,} values; write the values out, or use fewer aliases")
    try:
        while (event := parser.get_event()) is not None:
            if isinstance(event, _OPENS):
                if len(open_) > MAX_DEPTH:
                    raise yaml.YAMLError(f"line {event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
                open_.append((event.anchor, 1))
            elif isinstance(event, _CLOSES):
                anchor, total = open_.pop()
                if anchor is not None:
                    sizes[anchor] = total
                add(total, event)
            elif isinstance(event, yaml.AliasEvent):
                add(sizes.get(event.anchor, 1), event)
            elif isinstance(event, yaml.ScalarEvent):
                if event.anchor is not None:
                    sizes[event.anchor] = 1
                add(1, event)
    finally:
        parser.dispose()


class StrictLoader(_Loader):  # type: ignore[misc, valid-type]
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
