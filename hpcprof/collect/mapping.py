"""The map of collect: every rank file of a run not cached yet analysed by its tool's ToolCollector
in worker tasks, several files a task, each task's tables written into one bundle (hpcprof.collect.cache)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Executor
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from hpcprof.collect.cache import (
    FilePart,
    ManifestEntry,
    PendingFile,
    parts_dir,
    pending_files,
    save_manifest,
)
from hpcprof.collect.common import Report, gc_paused, short
from hpcprof.core.errors import Problem, WorkerDied
from hpcprof.core.pool import Log, Progress, cores_per_file, executor_workers, stream_map, write_bundle
from hpcprof.run.results import ResultError, check_name

if TYPE_CHECKING:
    import pyarrow as pa

#: the most files in one map task, and about how many tasks each worker gets (task_size); a task's
#: exports are analysed in one joint pass: per file 2.82 ms of CPU in a pass of 8 per-rank exports,
#: 2.42 of 16, 2.28 of 32, 2.26 of 64 (benchmarks/collect_file.py's export)
TASK_FILES, TASKS_PER_WORKER = 32, 8
#: seconds between saves of the map's manifest (what is done), which an interrupted collect keeps
MANIFEST_EVERY_S = 5.0


T = TypeVar("T")    # an item of split_tasks


class MapFailure(NamedTuple):
    """Why one file of a map task gave no tables: `note` when it had nothing to analyse (a note,
    not a problem), else the short reason it was skipped. Plain text: any exception a file raises
    comes back to this process, where an exception that does not unpickle would break the pool."""

    note: bool
    message: str


def map_task(tool: str, files: list[tuple[str, int]], parts: str, bundle: str,
             tool_paths: dict[str, str], cores: int = 1) -> list[FilePart | MapFailure]:
    """The tables of several rank files in one worker task (the tool's analyse_batch: each file's
    tables, or its error, on its own; on `cores` cores, see pool.cores_per_file), written together
    into one bundle, `parts/<bundle>`; per file where its tables are, or why it has none.
    (A task per file cost the collecting process ~0.4 ms a file in the pool's submit, pickling and
    result handling, and an mpi4py.futures worker a round trip per file; a bundle per file cost
    its write and the reduce's read of it ~1 ms a file.)"""
    from hpcprof.analysis.collector import NothingToAnalyse
    from hpcprof.analysis.registry import collector

    out: list[FilePart | MapFailure] = []
    written: list[dict[str, pa.Table]] = []
    for tables in collector(tool, tool_paths, cores).analyse_batch([(Path(path), rank) for path, rank in files]):
        if isinstance(tables, dict):
            try:
                for name in tables:
                    check_name(f"{tool}_{name}")
            except ResultError as exc:
                tables = exc
        if isinstance(tables, NothingToAnalyse):   # readable, nothing for the analyses
            out.append(MapFailure(True, str(tables)))
        elif isinstance(tables, Exception):        # a damaged file: this file only
            out.append(MapFailure(False, short(tables)))
        else:
            out.append(FilePart(bundle, len(written), sorted(tables)) if tables else FilePart("", -1, []))
            if tables:
                written.append(tables)
    if written:
        try:
            write_bundle(Path(parts) / bundle, written)
        except Exception as exc:          # e.g. a full disk: each of its files is skipped with the reason
            failed = MapFailure(False, short(exc))
            out = [failed if isinstance(o, FilePart) and o.tables else o for o in out]
    return out


def task_size(files: int, workers: int) -> int:
    """Files per map task: up to TASK_FILES, while every worker still gets about TASKS_PER_WORKER
    tasks (the workers then finish together)."""
    return max(1, min(TASK_FILES, files // (workers * TASKS_PER_WORKER)))


def split_tasks(items: list[T], workers: int) -> list[list[T]]:
    """`items` cut into map tasks, in order: of task_size files, but with several workers their
    last round (the last `workers` tasks' worth of files) in tasks of a quarter of that, so that
    the workers end within a quarter of a task of one another."""
    size = task_size(len(items), workers)
    small = max(1, size // 4)
    last_round = len(items) if workers == 1 else max(0, (len(items) - workers * size) // size * size)
    return ([items[i:i + size] for i in range(0, last_round, size)]
            + [items[i:i + small] for i in range(last_round, len(items), small)])


def _bundle_name(task: list[PendingFile]) -> str:
    """The bundle of a map task, named by its first file and a digest of what its files are
    (key, rank, size, mtime): a collect that maps the same files the same way writes the same
    file, another never overwrites one a cached file still names."""
    import hashlib

    what = repr([(key, rank, size, mtime_ns) for _, rank, (size, mtime_ns), key in task]).encode()
    return f"{task[0][3]}.{hashlib.blake2b(what, digest_size=8).hexdigest()}.arrow"


def map_files(tool: str, files: dict[str, int], run_path: Path, executor: Executor, log: Log,
              problem: Report, tool_paths: dict[str, str] | None = None, in_flight: int = 1024,
              meanwhile: Callable[[], None] | None = None,
              on_file: Callable[[str, FilePart | None], None] = lambda key, part: None) -> dict[str, FilePart]:
    """Run `analyse_file` over every file of `files` (path -> rank) not collected yet (or changed,
    or whose cached bundle is damaged), in rank order, several files a task (map_task, one bundle
    per task: the consecutive ranks SliceConcat concatenates together are in one), about `in_flight` files
    submitted at a time but at least TASKS_PER_WORKER tasks a worker, streaming results as
    workers finish (`meanwhile()` runs in this process once the first files are submitted,
    stream_map: the work queued must outlast it, or the workers run dry; 2 tasks a worker, 0.4 s
    of work, against 0.7-0.9 s of own steps at 16,384 ranks on 16 cores); returns {part key:
    FilePart} of every usable file, in rank order. `on_file(key, part)` is called as each file has its outcome (part None:
    skipped), e.g. SliceConcat.file_done. Bundles no file names any more are removed (those a
    concurrent collect wrote since this one started are left)."""
    started = time.time()
    parts = parts_dir(run_path, tool)
    with gc_paused():
        pending, new, table_lists = pending_files(files, parts, problem, on_file)
    if len(new):
        log(f"{tool}: {len(new)} file(s) unchanged since the last collect, skipped")
    progress = Progress(f"{tool} {run_path.name}", len(pending), sum(size for _, _, (size, _), _ in pending), log)
    tasks = split_tasks(pending, executor_workers(executor))
    cores = cores_per_file(executor, len(pending))
    jobs = ((i, (tool, [(path, rank) for path, rank, _, _ in task], str(parts), _bundle_name(task),
                 tool_paths or {}, cores))
            for i, task in enumerate(tasks))
    saved = time.monotonic()
    try:
        queued = max(in_flight // len(tasks[0]), TASKS_PER_WORKER * executor_workers(executor)) if tasks else 1
        for i, future in stream_map(executor, map_task, jobs, queued, meanwhile):
            task = tasks[i]
            outcomes: list[FilePart | MapFailure | None]
            try:
                outcomes = future.result()
            except BrokenExecutor:  # a worker died (killed, out of memory): the files it left undone
                outcomes = [None] * len(task)
            for (path, rank, (size, mtime_ns), key), outcome in zip(task, outcomes, strict=True):
                if outcome is None:
                    problem(WorkerDied(Path(path)))
                    on_file(key, None)
                    continue
                if isinstance(outcome, MapFailure):
                    if not outcome.note:
                        problem(Problem(Path(path), f"skipped ({outcome.message})"))
                        on_file(key, None)
                        continue
                    log(f"{tool}: note: {outcome.message}")
                    outcome = FilePart("", -1, [])
                new[key] = ManifestEntry(size, mtime_ns, rank, outcome.bundle, outcome.position,
                                         table_lists.setdefault(tuple(outcome.tables), outcome.tables))
                on_file(key, outcome)
            progress.advance(sum(size for _, _, (size, _), _ in task), len(task))
            if time.monotonic() - saved > MANIFEST_EVERY_S:  # an interrupted collect keeps what is done
                save_manifest(parts, new)
                saved = time.monotonic()
    finally:
        progress.close()
    save_manifest(parts, new)
    named = {entry.bundle for entry in new.values()}
    for bundle in parts.glob("*.arrow"):
        with contextlib.suppress(OSError):
            if bundle.name not in named and bundle.stat().st_mtime < started:
                bundle.unlink()
    order = sorted(new, key=lambda k: (new[k].rank, k))
    return {k: FilePart(new[k].bundle, new[k].position, new[k].tables) for k in order}
