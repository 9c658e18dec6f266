"""A Kineto trace's `traceEvents` decoded in batches: never the whole JSON in memory.

A trace is one JSON object whose `traceEvents` array holds nearly all of the file as a flat list of
small objects. `EventStream` reads the file in chunks (`.json.gz` inflated on the fly, multi-member
gzip included), finds where the array starts, and cuts the text after it at an event boundary: the
last `}` of the chunk that is followed by `,` (or by the `]` that ends the array). That candidate is
checked by msgspec itself: `[` + the text up to the `}` + `]` decodes as a list of events only if the
`}` closes an object of the array (a `}` inside a string or a nested object leaves that text
unterminated or unbalanced, and the decode fails); a failed candidate gives way to the one before
it (a cost of one decode each, for text Kineto does not write). The check is the batch's decode
itself, in place in the buffer. So each batch is exactly the events of the chunk, decoded against
the caller's msgspec Struct (only its fields are built), and memory holds about one chunk of text
and its events at a time (gzip inflated with ISA-L when `isal` is installed, else zlib). The
object's other members (before and after the array: `distributedInfo`, ...) are decoded at the end
into the caller's head Struct.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from hpcprof.core.cpus import keep_freed_memory
from hpcprof.core.safe_paths import INFLATE_RATIO, inflate_limit, open_regular

#: JSON text per batch: about 4k Kineto events, whose text, Structs and columns stay in the caches and in the
#: heap's pages already touched (4 MiB: `trace all` of 2 files of 72 MB on 2 cores 33.8k -> 23.0k page faults,
#: 0.89 -> 0.81 CPU s, its largest process 78 -> 66 MB; 512 KiB-1.5 MiB the same)
BATCH_BYTES = 1 << 20
#: compressed bytes read at a time: about one batch once inflated (the input a call leaves, its unconsumed
#: tail, is copied at every call: 1 MiB reads inflated a 7 MB trace in 31 ms, these in 29)
_READ_BYTES = 128 << 10
_WS = b" \t\r\n"
_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*')
_CUT = re.compile(rb"\}[ \t\r\n]*([,\]])")
_EVENT_END = re.compile(rb"\}[ \t\r]*(?:(,)[ \t\r]*\n[ \t\r\n]*\{|\n[ \t\r\n]*(\]))")
_EVENT_WINDOW = 64 << 10  # bytes searched for a line-broken event boundary (Kineto's events are < 2 kB)
_SPACE = re.compile(rb"[ \t\r\n]*")
#: the most text held without an event boundary (before the array, one event, after the array);
#: Kineto's events are < 2 kB and the object's other members a few kB
MAX_UNSPLIT = 64 << 20

try:  # ISA-L inflates gzip about 3x faster than zlib (isal: a dependency on x86-64 and ARM64, where it has wheels)
    INFLATE: Any = importlib.import_module("isal.isal_zlib")
except ImportError:
    INFLATE = zlib
_INFLATE_ERRORS = (zlib.error, INFLATE.error)

H = TypeVar("H", bound=msgspec.Struct)
E = TypeVar("E", bound=msgspec.Struct)
T = TypeVar("T")


class TraceError(Exception):
    """A trace file that cannot be analysed; the message names the file."""


@functools.cache
def reuse_freed_memory() -> None:
    """Have glibc's malloc keep the buffers a decode frees (chunks of a few MB, allocated again
    batch after batch) in the heap, to be reused, rather than mmap each one and trim the heap: every
    page of each was faulted in again (`trace all` of 2 files of 66 MB on 2 cores: 90k -> 33k page
    faults, 0.15 -> 0.06 system s; up to 16 MB a chunk, 64 MB kept free). Once per process; elsewhere
    than Linux nothing (cpus.keep_freed_memory)."""
    keep_freed_memory(16 << 20, 64 << 20)


def read_chunks(path: Path, size: int = BATCH_BYTES) -> Iterator[bytes]:
    """The file's bytes (inflated if gzip) in chunks of at most `size` bytes. TraceError names an
    unreadable file (a FIFO or a device is never read: safe_paths.open_regular), gzip data that is
    truncated or corrupt (raised before its last bytes) or that inflates past safe_paths.inflate_limit
    of its size (a decompression bomb: raised as soon as it is passed)."""
    try:
        with open_regular(path) as file:
            limit = inflate_limit(os.fstat(file.fileno()).st_size)
            inflated = 0
            data = file.read(2)
            if data != b"\x1f\x8b":
                data += file.read(max(0, size - 2))
                while data:
                    yield data
                    data = file.read(size)
                return
            data += file.read(_READ_BYTES)
            inflate = INFLATE.decompressobj(wbits=31)
            while data:
                out = inflate.decompress(data, size)
                inflated += len(out)
                if inflated > limit:
                    raise TraceError(f"{path}: gzip data that inflates to more than {limit >> 20} MB, over "
                                     f"{INFLATE_RATIO} times its size: not a trace torch.profiler writes "
                                     "(a decompression bomb?)")
                if out:
                    yield out
                if inflate.eof:  # a gzip member ends; another may follow (concatenated .gz files)
                    data = inflate.unused_data
                    if data:
                        inflate = INFLATE.decompressobj(wbits=31)
                    elif tail := file.read(_READ_BYTES):
                        inflate, data = INFLATE.decompressobj(wbits=31), tail
                else:
                    data = inflate.unconsumed_tail or file.read(_READ_BYTES)
            if out := inflate.flush():  # what the last call held back at `size` bytes
                yield out
            if not inflate.eof:
                raise zlib.error("end of file inside a gzip member")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except _INFLATE_ERRORS as exc:
        raise TraceError(f"{path}: truncated or corrupt gzip data ({exc})") from exc


class EventStream(Generic[H, E]):
    """Iterate to get the trace's events in file order, as lists of `event` Structs decoded from
    less than 2 x `batch_bytes` of JSON each (the rest of the last chunk and one more); afterwards `head` holds the object's other members
    decoded into `head` (a Struct). TraceError names a file that is not a Kineto trace."""

    def __init__(self, path: Path, head: type[H], event: type[E], batch_bytes: int = BATCH_BYTES):
        self.path = Path(path)
        self.batch_bytes = batch_bytes
        self._head_type = head
        self._decode_events: msgspec.json.Decoder[list[E]] = msgspec.json.Decoder(
            list[event])  # type: ignore[valid-type]  # (the Struct type given at run time)
        self._head: H | None = None

    @property
    def head(self) -> H:
        """The members other than traceEvents (available once the events have been iterated)."""
        if self._head is None:
            raise RuntimeError("EventStream.head is read after iterating the events")
        return self._head

    def _error(self, what: str) -> TraceError:
        return TraceError(f"{self.path}: not a Kineto JSON trace: {what}")

    def __iter__(self) -> Iterator[list[E]]:
        return self._batches(self._split)

    def texts(self) -> Iterator[bytes]:
        """The events' text in file order as JSON arrays (`[` + events + `]`) of about `batch_bytes`
        each, cut without decoding (_cut): in a compact trace a cut can fall inside a string, and
        that text (and the ones after it) then fails to decode as a list of events; a caller that
        decodes them elsewhere (in other processes) must then fall back to iterating."""
        return self._batches(self._cut)

    def _batches(self, split: Callable[[bytearray], tuple[T | None, int]]) -> Iterator[T]:
        """`split` applied to the buffered text of the array (`[` and what is not consumed yet)
        until the array ends: each item it returns, the rest kept; None means no boundary yet."""
        reuse_freed_memory()
        chunks = read_chunks(self.path, self.batch_bytes)
        prefix = b""
        for chunk in chunks:  # the text up to the array: small (schemaVersion, deviceProperties, ...)
            prefix += chunk
            start = self._array_start(prefix)
            if start is not None:
                break
            if len(prefix) > MAX_UNSPLIT:
                raise self._error(f"no traceEvents array in its first {MAX_UNSPLIT >> 20} MB")
        else:
            self._head = self._decode_head(prefix)  # a JSON object without traceEvents
            raise TraceError(f"{self.path}: no traceEvents array; not a Kineto trace")
        # buf: `[` and the text not yet decoded; prefix: the head before the array's `[`
        buf, prefix = bytearray(b"[") + prefix[start:], prefix[:start - 1]
        done = False
        while True:
            while not done and len(buf) < self.batch_bytes:
                more = next(chunks, None)
                done = more is None
                buf += more or b""
            first = _SPACE.match(buf, 1).end()  # type: ignore[union-attr]  # (matches always)
            if buf[first:first + 1] == b"]":
                break
            del buf[1:first]   # the blanks between events: never held (a trace padded with blanks)
            item, rest = split(buf)
            if item is None:
                if done:
                    raise self._error(self._failure(buf))
                if len(buf) > MAX_UNSPLIT:
                    raise self._error(f"an event of more than {MAX_UNSPLIT >> 20} MB")
                more = next(chunks, None)  # an event longer than the batch: read on
                done = more is None
                buf += more or b""
                continue
            yield item
            del buf[1:rest]  # moves only the rest (less than an event)
        rest_of_object = bytearray(buf[first + 1:])   # after the array: small (traceName, ...)
        for chunk in chunks:
            rest_of_object += chunk
            if len(rest_of_object) > MAX_UNSPLIT:
                raise self._error(f"more than {MAX_UNSPLIT >> 20} MB after the traceEvents array")
        self._head = self._decode_head(prefix + b"[]" + rest_of_object)

    def _array_start(self, prefix: bytes) -> int | None:
        """Where the top-level traceEvents array's text starts (after its `[`), None if not read yet."""
        first = prefix.lstrip(_WS)[:1]
        if first and first != b"{":
            raise self._error(f"a JSON object was expected, the file starts with {first!r}")
        for key in _KEY.finditer(prefix):
            value = prefix[key.end():key.end() + 1]
            if not value:
                return None  # the value is in the next chunk
            # the key is a member of the top-level object iff the text before it closes with one `}`
            if self._valid(prefix[:key.end()] + b"null}"):
                return key.end() + 1 if value == b"[" else None
        return None

    def _split(self, buf: bytearray) -> tuple[list[E] | None, int]:
        """The events of `buf` (`[` and text) up to its last event boundary, checked by decoding
        them in place (the byte after the boundary's `}` briefly set to `]`), and where the rest
        starts."""
        end = len(buf)
        while (pos := buf.rfind(b"}", 0, end)) >= 0:
            cut = _CUT.match(buf, pos)
            end = pos
            if cut is None:
                continue
            after, buf[pos + 1] = buf[pos + 1], ord("]")
            try:
                with memoryview(buf) as view, view[:pos + 2] as text:
                    events = self._decode_events.decode(text)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            finally:
                buf[pos + 1] = after
            return events, cut.end() if cut.group(1) == b"," else cut.start(1)
        return None, 1

    @staticmethod
    def _cut(buf: bytearray) -> tuple[bytes | None, int]:
        """The text of `buf` up to its last likely event boundary, closed with `]` (not decoded:
        texts()), and where the rest starts. Likely: a `}` then `,` and a line break before the next
        `{` (or a line break before the array's `]`), as Kineto writes them, found in the last
        _EVENT_WINDOW bytes: a line break is never inside a JSON string. Else (a compact trace)
        the last `}` followed by `,` or `]`, which may be inside a string."""
        last = None
        for match in _EVENT_END.finditer(buf, max(1, len(buf) - _EVENT_WINDOW)):
            last = match
        if last is not None:
            pos, rest = last.start(), last.end(1) if last.group(1) else last.start(2)
        else:
            end, cut = len(buf), None
            while cut is None and (pos := buf.rfind(b"}", 0, end)) >= 0:
                cut, end = _CUT.match(buf, pos), pos
            if cut is None:
                return None, 1
            rest = cut.end() if cut.group(1) == b"," else cut.start(1)
        after, buf[pos + 1] = buf[pos + 1], ord("]")      # one copy: the byte after the `}` briefly `]`
        with memoryview(buf) as view, view[:pos + 2] as text:
            batch = bytes(text)
        buf[pos + 1] = after
        return batch, rest

    def _failure(self, text: bytearray) -> str:
        try:
            self._decode_events.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return str(exc)
        return "unexpected end of the traceEvents array"

    def _decode_head(self, text: bytes) -> H:
        try:
            return msgspec.json.decode(text, type=self._head_type)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self._error(str(exc)) from exc

    @staticmethod
    def _valid(text: bytes) -> bool:
        try:
            msgspec.json.decode(text)
        except msgspec.DecodeError:
            return False
        return True
