"""YAML that any file may hold, parsed within bounds: nesting and aliases checked from the parser's
event stream before anything is built (`check_depth`), then a safe load (`load_bounded`). The one
bounded loader of every YAML hpcprof reads: the config files' strict loader
(hpcprof.config.validation) builds on it, and a workload's `--sizes-from` uses it as it is."""

from __future__ import annotations

from typing import Any

import yaml

#: Deepest nesting of mappings and lists a YAML file may have.
MAX_DEPTH = 32
#: the most values a YAML file may expand to, its aliases counted as what they name
MAX_VALUES = 100_000


#: libyaml's parser and composer (PyYAML's wheels include it) where there is one: 15x faster than
#: the pure-Python ones on the site configs, which every command that lists or renders reads
SafeLoader: Any = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def check_depth(text: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH, and aliases that would expand to more than MAX_VALUES
    values (an alias bomb, merge keys `<<: [*a, *a]` over merged mappings: each alias counted as
    the size of what it names), from the parser's event stream before anything is built or
    expanded (no recursion: libyaml's composer recurses in C and crashes on ~100,000 levels,
    Python's would raise RecursionError)."""
    parser = SafeLoader(text)
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


def load_bounded(text: str) -> Any:
    """`text` parsed by yaml's safe loader once check_depth has found its nesting and aliases within
    bounds (yaml.YAMLError naming the line otherwise)."""
    check_depth(text)
    return yaml.load(text, Loader=SafeLoader)  # noqa: S506 - SafeLoader is yaml's (C)SafeLoader
