"""Pickles read as plain data, never as code: dict, list, tuple, set, frozenset, str, bytes, int,
float, bool and None, by the standard library's unpickler with its globals restricted (the `pickle`
documentation's "Restricting Globals"), then checked as data.

A pickle may name a class or function to call (GLOBAL, STACK_GLOBAL, then REDUCE, INST, OBJ,
NEWOBJ...): loading it with `pickle` would run that code. Here `find_class` allows only the names
plain data itself needs in protocols 0-2 (`set`, `frozenset`, `bytes()` and `_codecs.encode(str,
"latin1")`), each a guard that refuses other arguments; any other name is refused before it is
called. Sizes a pickle declares beyond the bytes it holds are refused by the unpickler before it
allocates (it reads from memory).

Then the data is walked once per distinct object (the memo's sharing kept): anything but plain data
is refused (a name used as data), and so are a cycle, nesting deeper than `max_depth`, and more than
`max_nodes` nodes of the data as a tree (a list the memo shares N times counts N times, so a small
pickle of lists of lists of a shared list cannot stand for an exponential tree that a consumer would
walk). Every refusal is one `PickleRefused` (a ValueError).
"""

from __future__ import annotations

import io
import pickle
from typing import IO, Any

#: the default limits: nodes of the data as a tree, nesting depth
MAX_NODES = 20_000_000
MAX_DEPTH = 100
_CONTAINERS = frozenset({list, dict, tuple, set, frozenset})
_SCALARS = frozenset({str, int, float, bytes, bool, type(None)})


class PickleRefused(ValueError):
    """A pickle that is not plain data, is damaged, or is beyond the limits."""


def _set(*args: Any) -> set[Any]:
    if len(args) > 1 or (args and not isinstance(args[0], list)):
        raise PickleRefused("set called with other than plain data's arguments")
    return set(*args)


def _frozenset(*args: Any) -> frozenset[Any]:
    if len(args) > 1 or (args and not isinstance(args[0], list)):
        raise PickleRefused("frozenset called with other than plain data's arguments")
    return frozenset(*args)


def _bytes(*args: Any) -> bytes:
    if args:      # bytes(N) would allocate N bytes the pickle does not hold
        raise PickleRefused("bytes called with other than plain data's arguments")
    return b""


def _encode(*args: Any) -> bytes:
    if len(args) != 2 or not isinstance(args[0], str) or args[1] not in ("latin1", "latin-1"):
        raise PickleRefused("encode called with other than plain data's arguments")
    try:
        return args[0].encode("latin-1")
    except UnicodeEncodeError:
        raise PickleRefused("bytes that are not latin-1 text") from None


_NAMES = {("builtins", "set"): _set, ("__builtin__", "set"): _set, ("builtins", "frozenset"): _frozenset,
          ("__builtin__", "frozenset"): _frozenset, ("builtins", "bytes"): _bytes, ("__builtin__", "bytes"): _bytes,
          ("_codecs", "encode"): _encode}


class _Plain(pickle.Unpickler):
    """The unpickler that finds only _NAMES' guards."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = _NAMES.get((module, name))
        if allowed is None:
            raise PickleRefused(f"refused {module}.{name}: a pickle naming code is not plain data")
        return allowed


def _check(root: Any, max_nodes: int, max_depth: int) -> None:
    """Refuse `root` unless it is plain data, acyclic, at most `max_depth` deep and `max_nodes`
    nodes as a tree; each distinct container is entered once, its size and depth kept by id (the
    unpickler makes only these exact types: no subclass can be named)."""
    done: dict[int, tuple[int, int]] = {}      # id of a container -> (its nodes as a tree, its depth)
    inside: dict[int, tuple[Any, list[Any], int]] = {}   # id of a container entered -> (it, its containers, its scalars)
    stack: list[Any] = [root]
    while stack:
        value = stack[-1]
        key = id(value)
        if type(value) not in _CONTAINERS:
            stack.pop()
            if type(value) not in _SCALARS:
                raise PickleRefused(f"not plain data: a {type(value).__name__} used as data")
            continue
        if key in done:
            stack.pop()
            continue
        entered = inside.get(key)
        if entered is None:
            children = [*value.keys(), *value.values()] if type(value) is dict else value
            inner = [c for c in children if type(c) in _CONTAINERS]
            inside[key] = (value, inner, len(children) - len(inner))
            for child in inner:             # the containers entered and not done: this one's ancestors
                if id(child) in inside:
                    raise PickleRefused("a cycle: a container holds itself")
            stack.extend(inner)
            for child in children:
                if type(child) not in _CONTAINERS and type(child) not in _SCALARS:
                    raise PickleRefused(f"not plain data: a {type(child).__name__} used as data")
            continue
        stack.pop()
        del inside[key]
        _, inner, scalars = entered
        size = 1 + scalars + sum(done[id(c)][0] for c in inner)
        depth = 1 + max((done[id(c)][1] for c in inner), default=0)
        if depth > max_depth:
            raise PickleRefused(f"nested deeper than {max_depth}")
        if size > max_nodes:
            raise PickleRefused(f"more than {max_nodes:,} nodes as a tree")
        done[key] = (size, depth)


def loads(data: bytes, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """The plain data of the pickle `data`; PickleRefused where it is not plain data, is damaged or
    is beyond the limits (bytes after its STOP are left unread, as pickle does)."""
    try:
        value = _Plain(io.BytesIO(bytes(data))).load()
    except PickleRefused:
        raise
    except Exception as exc:  # the unpickler's every error on damaged or non-plain input
        raise PickleRefused(f"not plain data ({type(exc).__name__}: {exc})") from None
    _check(value, max_nodes, max_depth)
    return value


def load(fh: IO[bytes], *, max_bytes: int, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """`loads` of what `fh` holds from its position, refused unread when that is over `max_bytes`."""
    try:
        data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise PickleRefused(f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise PickleRefused(f"larger than {max_bytes:,} bytes, not read")
    return loads(data, max_nodes=max_nodes, max_depth=max_depth)
