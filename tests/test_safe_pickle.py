"""hpcprof.core.safe_pickle: plain data read as pickle itself reads it, and everything else refused
before any code runs: code (REDUCE of os.system, BUILD, INST, OBJ, NEWOBJ), sizes beyond the bytes
held, nesting past the depth limit, memo-shared trees past the node limit, cycles, damaged files."""

from __future__ import annotations

import io
import math
import os
import pickle
import struct
from pathlib import Path

import pytest

from hpcprof.core.safe_pickle import PickleRefused, load, loads

SHARED = [1, "two"]
PLAIN = [None, True, False, 0, 1, -1, 255, 256, 65535, 65536, -2**31, 2**31 - 1, 2**31, 2**64, -2**100, 1.5, -0.0,
         float("inf"), 1e-300, "", "é😀\u2028\ud800x", "a" * 300, b"", b"\x00\xff", b"x" * 300, (), (1,), (1, 2),
         (1, 2, 3), (1, 2, 3, 4), [], [1, [2, [3]]], {}, {"a": 1, 2: [3], (1, 2): {"x": None}}, set(), {1, "a", (1, 2)},
         frozenset(), frozenset([1, 2]), [SHARED, SHARED, {"k": SHARED}], list(range(3000)),
         {i: str(i) for i in range(2500)}, {"s": set(range(2000))}, bytes(range(256))]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_data_reads_as_pickle_reads_it(protocol: int) -> None:
    for value in PLAIN:
        data = pickle.dumps(value, protocol)
        got = loads(data)
        assert got == pickle.loads(data) == value and type(got) is type(value), (protocol, value)
        if isinstance(value, float):
            assert math.copysign(1, got) == math.copysign(1, value)
    shared = loads(pickle.dumps([SHARED, SHARED], protocol))
    assert shared[0] is shared[1]      # the memo's sharing kept, as pickle keeps it


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Boom:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {marker}",))

    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps({"entries": [Boom()]}, protocol)
        with pytest.raises(PickleRefused, match=r"refused (posix|os)\.system: a pickle naming code"):
            loads(data)
    handmade = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    with pytest.raises(PickleRefused, match="refused os.system"):
        loads(handmade)
    assert not marker.exists()
    pickle.loads(handmade)             # what loading it naively does
    assert marker.exists()


@pytest.mark.parametrize(("data", "said"), [
    (b"}}b.", "has no attribute '__dict__'"),                                     # BUILD
    (b"(cbuiltins\ndict\ni.", "refused builtins.dict"),                           # INST
    (b"\x80\x02cbuiltins\nset\n)\x81.", "NEWOBJ class argument must be a type"),  # NEWOBJ
    (b"\x80\x02\x82\x01.", "unregistered extension code"),                        # EXT1
    (b"\x80\x02cbuiltins\nset\n.", "a function used as data"),                    # a name as the result
    (b"\x80\x02cbuiltins\nset\nK\x01\x85R.", "set called with other than plain data's arguments"),
    (b"\x80\x02cbuiltins\nbytes\nJ\x00\x00\x00\x7f\x85R.", "bytes called with other"),   # bytes(2**31)
    (b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00xX\x05\x00\x00\x00utf-8\x86R.", "encode called with other"),
    (b"\x80\x02]q\x00h\x00a.", "a cycle"),                                        # a list holding itself
    (b"\x80\x02}]\x88s.", "unhashable type: 'list'"),
])
def test_what_is_not_plain_data_is_refused(data: bytes, said: str) -> None:
    with pytest.raises(PickleRefused, match=said):
        loads(data)


def test_an_allowed_name_called_with_plain_arguments_is_plain_data() -> None:
    """OBJ and INST of `set` with no argument make an empty set, as pickle does; with one, refused."""
    assert loads(b"(cbuiltins\nset\no.") == set() == loads(b"(ibuiltins\nset\n.")
    with pytest.raises(PickleRefused, match="set called with other"):
        loads(b"(cbuiltins\nset\nK\x01o.")


def test_a_cycle_is_refused() -> None:
    first: list = []
    second = [first]
    first.append(second)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(PickleRefused, match="a cycle"):
            loads(pickle.dumps(first, protocol))


@pytest.mark.parametrize(("opcode", "size"), [
    (b"\x8d", struct.pack("<Q", 1 << 40)),        # BINUNICODE8 of 1 TiB
    (b"\x8e", struct.pack("<Q", 1 << 40)),        # BINBYTES8
    (b"X", struct.pack("<I", 0xFFFFFFFF)),        # BINUNICODE
    (b"T", struct.pack("<i", -5)),                # BINSTRING, a negative size
    (b"\x95", struct.pack("<Q", 1 << 40)),        # FRAME
    (b"\x8b", struct.pack("<i", 1 << 30)),        # LONG4
])
def test_a_declared_size_beyond_the_bytes_left_is_refused_before_allocating(opcode: bytes, size: bytes) -> None:
    data = (b"\x80\x04" + opcode + size + b"abcd")[:16].ljust(16, b".")
    assert len(data) == 16
    with pytest.raises(PickleRefused, match=r"truncated|MemoryError"):     # malloc refuses 1 TiB
        loads(data)


def test_nesting_past_the_depth_limit_is_refused() -> None:
    deep = b"\x80\x02" + b"]" * 150 + b"a" * 149 + b"."      # 150 lists, each in the next
    assert pickle.loads(deep) is not None
    with pytest.raises(PickleRefused, match="nested deeper than 100"):
        loads(deep)
    assert loads(deep, max_depth=150) == pickle.loads(deep)


def test_a_memo_shared_tree_is_counted_as_a_tree() -> None:
    """Lists of two references to the list below, 60 deep: a pickle of a few hundred bytes whose
    tree has 2**61 nodes (a consumer walking it would never end)."""
    tree: list = [0]
    for _ in range(60):
        tree = [tree, tree]
    data = pickle.dumps(tree)
    assert len(data) < 1000
    with pytest.raises(PickleRefused, match="nodes as a tree"):
        loads(data)
    small: list = [0]
    for _ in range(10):
        small = [small, small]
    assert loads(pickle.dumps(small)) == small and loads(pickle.dumps(small), max_nodes=2 ** 12) == small
    with pytest.raises(PickleRefused, match="nodes as a tree"):
        loads(pickle.dumps(small), max_nodes=2 ** 11)


def test_objects_past_the_node_limit_are_refused() -> None:
    with pytest.raises(PickleRefused, match="more than 1,000 nodes as a tree"):
        loads(pickle.dumps(list(range(2000))), max_nodes=1000)


@pytest.mark.parametrize("data", [b"", b".", b"\x80\x04", b"garbage that is not a pickle",
                                  pickle.dumps({"a": [1, 2, 3]})[:-3], b"\x80\x09N."])
def test_a_damaged_pickle_is_refused(data: bytes) -> None:
    with pytest.raises(PickleRefused):
        loads(data)


def test_load_reads_a_file_up_to_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "dump"
    path.write_bytes(pickle.dumps({"entries": list(range(100))}))
    with path.open("rb") as fh:
        assert load(fh, max_bytes=1 << 20) == {"entries": list(range(100))}
    with path.open("rb") as fh, pytest.raises(PickleRefused, match="larger than 100 bytes"):
        load(fh, max_bytes=100)
    assert issubclass(PickleRefused, ValueError)
    assert load(io.BytesIO(pickle.dumps("x")), max_bytes=100) == "x"
