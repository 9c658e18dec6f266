"""Pickles read as plain data, never as code: dict, list, tuple, set, frozenset, str, bytes, int,
float, bool and None, by an interpreter of pickle's opcodes (protocols 0-5) that knows no others.

A pickle may name a class or function to call (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ,
NEWOBJ...): loading it with `pickle` would run that code. Here the only names allowed are those
plain data itself needs in protocols 0-2 (`set`, `frozenset`, `bytes()`, and `_codecs.encode(str,
"latin1")` for bytes), each checked before it is applied; any other is refused before anything runs.

Limits, checked before anything is allocated: every size a pickle declares (a string's, a frame's)
against the bytes left in it (a 16-byte file cannot declare a 1 TiB string); the objects made and
the nodes of the data as a tree (`max_nodes`: a list the memo shares N times counts N times, so a
small pickle of lists of lists of a shared list cannot stand for an exponential tree); its depth
(`max_depth`). A container is sealed once it is an item of another: adding to it then is refused,
which also refuses every cycle. Every refusal is one `PickleRefused` (a ValueError) naming the
opcode's offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import IO, Any

#: the default limits: nodes of the data as a tree, nesting depth
MAX_NODES = 20_000_000
MAX_DEPTH = 100
#: longest text opcode line (protocol 0) and binary integer accepted, in bytes
_MAX_LINE = 1 << 16
_MAX_LONG = 1 << 10
_CONTAINERS = (list, dict, tuple, set, frozenset)
_SCALARS = {str, int, float, bytes, bool, type(None)}


class PickleRefused(ValueError):
    """A pickle that is not plain data, is damaged, or is beyond the limits."""


class _Allowed:
    """A name a protocol 0-2 pickle of plain data calls (set, frozenset, bytes, _codecs.encode)."""

    def __init__(self, name: str) -> None:
        self.name = name


_NAMES = {("builtins", "set"): "set", ("__builtin__", "set"): "set", ("builtins", "frozenset"): "frozenset",
          ("__builtin__", "frozenset"): "frozenset", ("builtins", "bytes"): "bytes",
          ("__builtin__", "bytes"): "bytes", ("_codecs", "encode"): "encode"}


class _Reader:
    """The interpreter: a stack, its marks, the memo, each container's weight (nodes) and depth."""

    def __init__(self, data: bytes, max_nodes: int, max_depth: int) -> None:
        self.data, self.pos, self.end, self.max_nodes, self.max_depth = data, 0, len(data), max_nodes, max_depth
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.weight: dict[int, tuple[int, int]] = {}   # id of a live container -> (nodes as a tree, depth)
        self.sealed: set[int] = set()                  # containers that are items of another
        self.nodes = 0
        self.offset = 0                                # where the opcode being read starts

    def refuse(self, why: str) -> PickleRefused:
        return PickleRefused(f"{why} (at byte {self.offset:,})")

    # -- reading ---------------------------------------------------------------------------
    def read(self, n: int) -> bytes:
        start, end = self.pos, self.pos + n
        if n < 0 or end > self.end:
            raise self.refuse(f"declares {n:,} bytes where {self.end - start:,} are left")
        self.pos = end
        return self.data[start:end]

    def line(self) -> bytes:
        end = self.data.find(b"\n", self.pos, self.pos + _MAX_LINE)
        if end < 0:
            raise self.refuse("a text line without its end, or longer than 64 KiB")
        start, self.pos = self.pos, end + 1
        return self.data[start:end]

    def size(self, fmt: str) -> int:
        data = self.read(struct.calcsize(fmt))
        return int(struct.unpack(fmt, data)[0])

    # -- weights ---------------------------------------------------------------------------
    def seal(self, item: Any) -> tuple[int, int]:
        """(nodes, depth) of `item` as a tree, which becomes an item of another container (or the
        result): a container is sealed, never added to again."""
        if isinstance(item, _Allowed):
            raise self.refuse(f"{item.name} used as data")
        if isinstance(item, _CONTAINERS):
            self.sealed.add(id(item))
            return self.weight.get(id(item), (1, 1))
        return 1, 0

    def count(self) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise self.refuse(f"more than {self.max_nodes:,} objects")

    def weigh(self, container: Any, items: list[Any] | tuple[Any, ...], start: tuple[int, int] = (1, 1)) -> None:
        """`container`'s nodes and depth with `items` added (each sealed), checked against the limits."""
        nodes, depth = start
        for item in items:
            if type(item) in _SCALARS:
                nodes += 1
                continue
            n, d = self.seal(item)
            nodes, depth = nodes + n, max(depth, d + 1)
        if depth > self.max_depth:
            raise self.refuse(f"nested deeper than {self.max_depth}")
        if nodes > self.max_nodes:
            raise self.refuse(f"more than {self.max_nodes:,} nodes as a tree (counting shared ones each time)")
        self.weight[id(container)] = (nodes, depth)

    def made(self, container: Any, items: list[Any] | tuple[Any, ...]) -> Any:
        """A new container of `items` (already checked), weighed."""
        self.count()
        self.sealed.discard(id(container))    # the id of a container no longer alive, now this one's
        self.weigh(container, items)
        return container

    def push_new(self, container: Any) -> None:
        """An empty container that items will be added to."""
        self.stack.append(self.made(container, ()))

    def push(self, value: Any) -> None:
        self.count()
        self.stack.append(value)

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise self.refuse("no mark")
        items, self.stack = self.stack, self.marks.pop()
        return items

    def top(self, kind: type | tuple[type, ...]) -> Any:
        if not self.stack or not isinstance(self.stack[-1], kind):
            raise self.refuse("an item added to what is not a container of its kind")
        return self.stack[-1]

    # -- the opcodes ---------------------------------------------------------------------
    def load(self) -> Any:
        ops = self.ops()
        data, end = self.data, self.end
        while True:
            self.offset = self.pos
            if self.pos >= end:
                raise self.refuse("ends without STOP")
            code = data[self.pos]
            self.pos += 1
            if code == 0x2E:  # STOP
                if len(self.stack) != 1 or self.marks:
                    raise self.refuse("STOP with a stack of other than one item")
                value = self.stack[0]
                self.seal(value)
                return value
            op = ops.get(code)
            if op is None:
                raise self.refuse(f"opcode {bytes([code])!r} is not plain data")
            op()

    def ops(self) -> dict[int, Callable[[], None]]:
        """Every opcode plain data needs, by its byte."""
        def unicode(n: int) -> None:
            try:
                self.push(self.read(n).decode("utf-8", "surrogatepass"))
            except UnicodeDecodeError as exc:
                raise self.refuse(f"a string that is not UTF-8 ({exc.reason})") from None

        def long_text(text: bytes) -> int:
            try:
                return int(text.rstrip(b"L") or b"0", 0 if text.startswith((b"0x", b"0X")) else 10)
            except ValueError:
                raise self.refuse(f"not an integer: {text[:40]!r}") from None

        def long_bin(n: int) -> None:
            if n > _MAX_LONG:
                raise self.refuse(f"an integer of {n:,} bytes")
            self.push(int.from_bytes(self.read(n), "little", signed=True))

        def text_int() -> None:
            text = self.line()
            self.push(True if text == b"01" else False if text == b"00" else long_text(text))

        def text_float() -> None:
            try:
                self.push(float(self.line()))
            except ValueError:
                raise self.refuse("not a float") from None

        def text_string() -> None:
            text = self.line()
            if len(text) < 2 or text[0] != text[-1] or text[:1] not in (b"'", b'"'):
                raise self.refuse("a quoted string without its quotes")
            self.push(text[1:-1].decode("unicode_escape"))

        def tuple_of(n: int) -> None:
            if len(self.stack) < n:
                raise self.refuse("a tuple of more items than the stack holds")
            items = self.stack[len(self.stack) - n:]
            del self.stack[len(self.stack) - n:]
            self.stack.append(self.made(tuple(items), items))

        def tuple_mark() -> None:
            items = self.pop_mark()
            self.stack.append(self.made(tuple(items), items))

        def list_mark() -> None:
            items = self.pop_mark()
            self.stack.append(self.made(list(items), items))

        def dict_mark() -> None:
            items = self.pop_mark()
            self.stack.append(self.made(self.pairs({}, items), items))

        def append() -> None:
            item = self.stack.pop()
            self.add(self.top(list), [item])

        def appends() -> None:
            items = self.pop_mark()
            self.add(self.top(list), items)

        def setitem() -> None:
            if len(self.stack) < 3:
                raise self.refuse("SETITEM without its key and value")
            value, key = self.stack.pop(), self.stack.pop()
            self.add(self.top(dict), [key, value])

        def setitems() -> None:
            items = self.pop_mark()
            self.add(self.top(dict), items)

        def additems() -> None:
            items = self.pop_mark()
            self.add(self.top(set), items)

        def frozen() -> None:
            items = self.pop_mark()
            self.stack.append(self.made(self.hashed(frozenset, items), items))

        def put(index: int) -> None:
            if not self.stack:
                raise self.refuse("PUT on an empty stack")
            self.memo[index] = self.stack[-1]

        def get(index: int) -> None:
            if index not in self.memo:
                raise self.refuse(f"memo {index} was never put")
            self.stack.append(self.memo[index])

        def mark() -> None:
            self.marks.append(self.stack)
            self.stack = []

        def pop() -> None:
            if self.stack:
                self.stack.pop()
            else:
                self.pop_mark()

        def dup() -> None:
            if not self.stack:
                raise self.refuse("DUP on an empty stack")
            self.stack.append(self.stack[-1])

        def pop_mark() -> None:
            self.pop_mark()

        def frame() -> None:
            if self.size("<Q") > self.end - self.pos:
                raise self.refuse("a frame longer than the pickle")

        def proto() -> None:
            if self.read(1)[0] > 5:
                raise self.refuse("a pickle protocol above 5")

        def global_text() -> None:
            module, name = self.line().decode("utf-8", "replace"), self.line().decode("utf-8", "replace")
            self.named(module, name)

        def stack_global() -> None:
            if len(self.stack) < 2 or not all(isinstance(s, str) for s in self.stack[-2:]):
                raise self.refuse("STACK_GLOBAL without its names")
            name, module = self.stack.pop(), self.stack.pop()
            self.named(module, name)

        return {
            0x80: proto, 0x95: frame, 0x28: mark, 0x30: pop, 0x31: pop_mark, 0x32: dup,
            0x4E: lambda: self.push(None), 0x88: lambda: self.push(True), 0x89: lambda: self.push(False),
            0x49: text_int, 0x4A: lambda: self.push(self.size("<i")), 0x4B: lambda: self.push(self.read(1)[0]),
            0x4D: lambda: self.push(self.size("<H")), 0x4C: lambda: self.push(long_text(self.line())),
            0x8A: lambda: long_bin(self.read(1)[0]), 0x8B: lambda: long_bin(self.size("<i")),
            0x46: text_float, 0x47: lambda: self.push(struct.unpack(">d", self.read(8))[0]),
            0x53: text_string, 0x54: lambda: self.push(self.read(self.size("<i")).decode("latin-1")),
            0x55: lambda: self.push(self.read(self.read(1)[0]).decode("latin-1")),
            0x56: lambda: self.push(self.line().decode("raw_unicode_escape")),
            0x58: lambda: unicode(self.size("<I")), 0x8C: lambda: unicode(self.read(1)[0]),
            0x8D: lambda: unicode(self.size("<Q")),
            0x42: lambda: self.push(self.read(self.size("<I"))), 0x43: lambda: self.push(self.read(self.read(1)[0])),
            0x8E: lambda: self.push(self.read(self.size("<Q"))),
            0x29: lambda: self.stack.append(self.made((), ())), 0x74: tuple_mark, 0x85: lambda: tuple_of(1),
            0x86: lambda: tuple_of(2), 0x87: lambda: tuple_of(3),
            0x5D: lambda: self.push_new([]), 0x6C: list_mark, 0x61: append, 0x65: appends,
            0x7D: lambda: self.push_new({}), 0x64: dict_mark, 0x73: setitem, 0x75: setitems,
            0x8F: lambda: self.push_new(set()), 0x90: additems, 0x91: frozen,
            0x70: lambda: put(long_text(self.line())), 0x71: lambda: put(self.read(1)[0]),
            0x72: lambda: put(self.size("<I")), 0x94: lambda: put(len(self.memo)),
            0x67: lambda: get(long_text(self.line())), 0x68: lambda: get(self.read(1)[0]),
            0x6A: lambda: get(self.size("<I")),
            0x63: global_text, 0x93: stack_global, 0x52: self.reduce,
        }

    def add(self, container: Any, items: list[Any]) -> None:
        """APPEND(S), SETITEM(S), ADDITEMS: `items` into `container` (not sealed), checked and weighed."""
        self.weigh(container, items, self.weight.get(id(container), (1, 1)))   # seals the items
        if id(container) in self.sealed:
            raise self.refuse("a container added to after it became an item of another (or a cycle)")
        if isinstance(container, list):
            container.extend(items)
        elif isinstance(container, dict):
            self.pairs(container, items)
        else:
            container.update(self.hashed(list, items))

    def pairs(self, target: dict[Any, Any], items: list[Any]) -> dict[Any, Any]:
        if len(items) % 2:
            raise self.refuse("a dict of an odd number of items")
        for key in items[::2]:
            self.hashed(list, [key])
        target.update(zip(items[::2], items[1::2], strict=True))
        return target

    def hashed(self, kind: Callable[[list[Any]], Any], items: list[Any]) -> Any:
        """`items`, each checked to be a key a dict or set can hold (never a list or a dict)."""
        for item in items:
            try:
                hash(item)
            except TypeError:
                raise self.refuse(f"a {type(item).__name__} used as a key") from None
        return kind(items)

    def named(self, module: str, name: str) -> None:
        allowed = _NAMES.get((module, name))
        if allowed is None:
            raise self.refuse(f"refused {module}.{name}: a pickle naming code is not plain data")
        self.stack.append(_Allowed(allowed))

    def reduce(self) -> None:
        """set(list), frozenset(list), bytes(), _codecs.encode(str, "latin1"): nothing else is called."""
        if len(self.stack) < 2 or not isinstance(self.stack[-2], _Allowed) or not isinstance(self.stack[-1], tuple):
            raise self.refuse("REDUCE of other than an allowed name and its arguments")
        args, function = self.stack.pop(), self.stack.pop().name
        if function in ("set", "frozenset") and (not args or (len(args) == 1 and isinstance(args[0], list))):
            items = list(args[0]) if args else []
            kind = set if function == "set" else frozenset
            self.stack.append(self.made(self.hashed(kind, items), items))
        elif function == "bytes" and args == ():
            self.push(b"")
        elif (function == "encode" and len(args) == 2 and isinstance(args[0], str)
              and args[1] in ("latin1", "latin-1")):
            try:
                self.push(args[0].encode("latin-1"))
            except UnicodeEncodeError:
                raise self.refuse("bytes that are not latin-1 text") from None
        else:
            raise self.refuse(f"{function} called with other than plain data's arguments")


def loads(data: bytes, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """The plain data of the pickle `data`; PickleRefused where it is not plain data, is damaged or
    is beyond the limits (bytes after its STOP are left unread, as pickle does)."""
    try:
        return _Reader(bytes(data), max_nodes, max_depth).load()
    except (RecursionError, MemoryError, OverflowError, struct.error) as exc:
        raise PickleRefused(f"not plain data ({type(exc).__name__})") from None


def load(fh: IO[bytes], *, max_bytes: int, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """`loads` of what `fh` holds from its position, refused unread when that is over `max_bytes`."""
    try:
        data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise PickleRefused(f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise PickleRefused(f"larger than {max_bytes:,} bytes, not read")
    return loads(data, max_nodes=max_nodes, max_depth=max_depth)
