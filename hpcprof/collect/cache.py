"""collect's cache of the per-file parts of a run's profiles, `derived/<tool>/parts/`: the map's
bundles (each task's rank files' tables, hpcprof.core.pool.write_bundle) and the manifest of what was
mapped (FilePart per rank file: its bundle, its place there, its tables; with the size and mtime it
was mapped at). A file unchanged since (size, mtime, rank) whose bundle reads is not mapped again."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from hpcprof.collect.common import Report
from hpcprof.core.atomic import atomic_write
from hpcprof.core.errors import Problem
from hpcprof.core.pool import DamagedBundle, read_bundle

#: a rank file the map analyses: its path, rank, (size, mtime_ns) and part key (no os.stat_result: ~0.5 kB each)
PendingFile = tuple[str, int, tuple[int, int], str]


def parts_dir(run_path: Path, tool: str) -> Path:
    """Where the parts of the run's `tool` profiles are kept."""
    return run_path / "derived" / tool / "parts"


def part_key(path: str) -> str:
    """A rank file's key in the cache: its name, one safe path component."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(path))


class FilePart(NamedTuple):
    """Where one rank file's tables are: the bundle of its map task (a file name in the parts
    directory; "" when the file has no tables) and the file's place among the bundle's files."""

    bundle: str
    position: int
    tables: list[str]


class ManifestEntry(NamedTuple):
    """A mapped file in the parts' manifest: its size, mtime and rank when it was mapped, and
    where its tables are (FilePart)."""

    size: int
    mtime_ns: int
    rank: int
    bundle: str
    position: int
    tables: list[str]


#: the parts' manifest (an Arrow IPC file, as Feather V2; not .arrow, the bundles' suffix: one row per mapped file,
#: the distinct table lists in its metadata), and the JSON one of earlier versions, no longer read
MANIFEST, OLD_MANIFEST = "manifest.feather", "manifest.json"


def load_manifest(parts: Path) -> dict[str, ManifestEntry]:
    """The manifest's entries by part key; none where it is missing or does not read (every file
    is then mapped again)."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(parts / MANIFEST)) as source:
            table = pa.ipc.open_file(source).read_all()
        lists = json.loads((table.schema.metadata or {})[b"tables"])
        if not all(isinstance(names, list) and all(isinstance(n, str) for n in names) for names in lists):
            return {}
        columns = [table.column(name).to_pylist() for name in ("key", *ManifestEntry._fields)]
        if not all(0 <= i < len(lists) for i in columns[-1]):
            return {}
        return {key: ManifestEntry(size, mtime, rank, bundle, position, lists[tables])
                for key, size, mtime, rank, bundle, position, tables in zip(*columns, strict=True)}
    except (OSError, pa.ArrowException, ValueError, KeyError, IndexError, TypeError):
        return {}


def save_manifest(parts: Path, entries: dict[str, ManifestEntry]) -> None:
    """Write the manifest as Arrow columns (a JSON document of every entry held ~1 kB of tokens per
    file at once: 20 MB at 16,384 ranks)."""
    import pyarrow as pa

    lists: dict[tuple[str, ...], int] = {}
    values = list(entries.values())
    table = pa.table({"key": list(entries), **{name: [getattr(e, name) for e in values]
                                                for name in ManifestEntry._fields[:-1]},
                      "tables": pa.array([lists.setdefault(tuple(e.tables), len(lists)) for e in values], pa.int32())},
                     metadata={"tables": json.dumps([list(names) for names in lists])})

    def write(tmp: Path) -> None:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)

    atomic_write(parts / MANIFEST, write, what="collect cache")
    (parts / OLD_MANIFEST).unlink(missing_ok=True)


def _cached(prev: ManifestEntry, stamp: tuple[int, int], rank: int, bundle_reads: Callable[[str], bool]) -> bool:
    """Whether a file's manifest entry `prev` still holds: the same size, mtime and rank, and its
    tables in a bundle that reads (every table matches its CRC; a damaged or truncated bundle
    is made again)."""
    return ((prev.size, prev.mtime_ns) == stamp and prev.rank == rank
            and (not prev.tables or bundle_reads(prev.bundle)))


def pending_files(files: dict[str, int], parts: Path, problem: Report,
                   on_file: Callable[[str, FilePart | None], None]
                   ) -> tuple[list[PendingFile], dict[str, ManifestEntry], dict[tuple[str, ...], list[str]]]:
    """map_files' listing: the files of `files` to map, in rank order; the manifest entries of those
    whose cached parts still hold (`on_file` called for each, and for each file that does not stat:
    a Problem); and the distinct table lists of those entries."""
    for stale in parts.glob("*/results"):   # the layout before bundles: a directory of Parquet files per file
        shutil.rmtree(stale.parent, ignore_errors=True)
    old = load_manifest(parts)
    new: dict[str, ManifestEntry] = {}
    table_lists: dict[tuple[str, ...], list[str]] = {}  # one list per distinct set of tables, not one per file
    readable: dict[str, bool] = {}

    def bundle_reads(bundle: str) -> bool:
        if bundle not in readable:
            try:
                read_bundle(parts / bundle)
                readable[bundle] = True
            except DamagedBundle:
                readable[bundle] = False
        return readable[bundle]

    pending: list[PendingFile] = []
    for path, rank in files.items():
        key = part_key(path)
        try:
            st = os.stat(path)
        except OSError as exc:
            problem(Problem(Path(path), f"skipped ({exc.strerror})"))
            on_file(key, None)
            continue
        prev = old.get(key)
        stamp = (st.st_size, st.st_mtime_ns)
        if prev is not None and _cached(prev, stamp, rank, bundle_reads):
            new[key] = prev._replace(tables=table_lists.setdefault(tuple(prev.tables), prev.tables))
            on_file(key, FilePart(prev.bundle, prev.position, new[key].tables))
        else:
            pending.append((path, rank, stamp, key))
    del old
    pending.sort(key=lambda file: (file[1], file[3]))   # rank order (names sort rank10 before rank2), as the slices
    return pending, new, table_lists
