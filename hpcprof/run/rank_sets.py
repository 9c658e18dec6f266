"""The one check of a set of rank files against its world (check_rank_set: a file per rank, each
rank in the world, none missing), which collect and the nsys, trace and ncu commands run on the
files they are given; its findings said in one line (RankSet.summary)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from hpcprof.run.ranks import RankSelection


@dataclass(frozen=True)
class RankSet:
    """Rank files checked against their world (check_rank_set): the file used for each rank, and
    those left out with why. `summary` says all of it in one line (None when all is well)."""

    #: path -> rank of the files used: one per rank (files of no known rank: rank None), in input order
    files: dict[str, int | None]
    #: another file of a rank already used -> that rank
    extra: dict[str, int] = field(default_factory=dict)
    #: files of a rank outside the world -> that rank
    outside: dict[str, int] = field(default_factory=dict)
    #: ranks that should have a file (in the world and the profile's selection) and have none
    missing: tuple[int, ...] = ()
    expected: int = 0
    world_size: int | None = None
    #: the files are numbered 1..world_size, not from 0 as MPI numbers ranks
    from_one: bool = False
    #: files given again (the same path, or a link to one given: `identity` of check_rank_set)
    twice: tuple[str, ...] = ()

    def summary(self, cause: Callable[[int], str] | None = None) -> str | None:
        """One line naming every file left out and every rank without a file (`cause(rank)`: why a
        rank has none, e.g. what its log says), or None when each rank of the world has its file."""
        parts = [_extra_part(self.files, self.extra, self.twice)] if self.extra or self.twice else []
        if self.from_one:
            numbered = sorted({r for r in self.files.values() if r is not None} | set(self.outside.values()))
            parts.append(f"the rank files are numbered from 1 ({_ranges(numbered)}) for a world of {self.world_size} "
                         "ranks, which count from 0 as MPI's do: "
                         f"{', '.join(os.path.basename(p) for p in self.outside)} left out (outside the world), "
                         f"{_missing_part(self.missing, self.expected, cause)}")
            return "; ".join(parts)
        if self.outside:
            names = [f"{os.path.basename(p)} (rank {r})" for p, r in self.outside.items()]
            parts.append(f"{len(names)} file(s) of ranks outside the world of {self.world_size} left out: "
                         + ", ".join(names[:5]) + (f" and {len(names) - 5:,} more" if len(names) > 5 else ""))
        if self.missing:
            parts.append(_missing_part(self.missing, self.expected, cause))
        return "; ".join(parts) or None


def _ranges(ranks: list[int], most: int = 8) -> str:
    """`0-2, 5, 7-9999` of sorted distinct ranks (the first `most` runs, then how many more)."""
    runs: list[tuple[int, int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], rank)
        else:
            runs.append((rank, rank))
    shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:most])
    return shown + (f" and {sum(b - a + 1 for a, b in runs[most:]):,} more" if len(runs) > most else "")


def _extra_part(used: dict[str, int | None], extra: dict[str, int], twice: tuple[str, ...]) -> str:
    """Which file of each rank is used and which are left out, and the files given twice."""
    kept = {rank: path for path, rank in used.items()}
    lines = [f"{os.path.basename(path)} given twice" for path in twice]
    lines += [f"rank {rank} has two files: {os.path.basename(kept[rank])} used, {os.path.basename(path)} left out"
              for path, rank in extra.items()]
    return "; ".join(lines[:3]) + (f"; and {len(lines) - 3:,} more files of a rank already given" if len(lines) > 3 else "")


def _missing_part(missing: tuple[int, ...], expected: int, cause: Callable[[int], str] | None) -> str:
    """The ranks without a file, grouped by why (a rank's own log named as `rank<N>` in a group)."""
    if not missing:
        return "no rank is missing"
    if len(missing) == 1:
        return f"rank {missing[0]}: {cause(missing[0]) if cause else 'no file'}"
    groups: dict[str, list[int]] = {}
    for rank in missing:
        groups.setdefault((cause(rank) if cause else "no file").replace(f"rank{rank}.", "rank<N>."), []).append(rank)
    said = "; ".join(f"ranks {_ranges(ranks)}: {why}" if len(ranks) > 1 else f"rank {ranks[0]}: {why}"
                     for why, ranks in groups.items())
    return f"{len(missing):,} of {expected:,} profiled ranks have no file ({said})"


def _stem(path: str) -> str:
    """A file's path without its suffix (`rank1.nsys-rep`, `rank1.sqlite`: `rank1`)."""
    return os.path.splitext(path)[0]


def _preferred(path: str, rank: int) -> bool:
    """Whether `path` is named as the rank wrapper names a rank's file (`rank<N>.`)."""
    return os.path.basename(path).lower().startswith(f"rank{rank}.")


def check_rank_set(files: Iterable[tuple[str, int | None]], world_size: int | None = None,
                   selection: RankSelection | None = None, ranks_per_node: int = 1,
                   report_and_export: bool = False, identity: Callable[[str], str] = os.path.normpath) -> RankSet:
    """The rank files `files` ((path, rank or None), in order) checked: a file given twice (the same
    path, or a link to it) and a second file of a rank are left out (of a rank's files, the one named
    `rank<N>.` as the rank wrapper names them is used, else the first; with `report_and_export`, files
    of a rank that differ only in their suffix, a report and its export, are one file); with
    `world_size`, files of ranks outside the world are left out and the ranks of the world that
    `selection` (default all, `ranks_per_node` giving local ranks) profiles but that have no file are
    missing. `identity` tells the same file given twice (os.path.realpath: links too; the default
    makes no system call, for the 16,384 files of a collect)."""
    used: dict[str, int | None] = {}
    extra: dict[str, int] = {}
    twice: list[str] = []
    by_rank: dict[int, str] = {}
    seen: set[str] = set()
    for path, rank in files:
        same = identity(path)
        if same in seen:
            twice.append(path)
            continue
        seen.add(same)
        if rank is None or rank < 0:
            used[path] = None
            continue
        if rank in by_rank:
            first = by_rank[rank]
            if report_and_export and _stem(path) == _stem(first):
                used[path] = rank
                continue
            if _preferred(path, rank) and not _preferred(first, rank):
                del used[first]
                extra[first] = rank
                by_rank[rank] = path
                used[path] = rank
            else:
                extra[path] = rank
            continue
        by_rank[rank] = path
        used[path] = rank
    if world_size is None:
        return RankSet(used, extra, twice=tuple(twice))
    outside = {p: r for p, r in used.items() if r is not None and r >= world_size}
    kept = {p: r for p, r in used.items() if p not in outside}
    present = {r for r in kept.values() if r is not None}
    chosen = selection or RankSelection("all")
    wanted = [r for r in range(world_size) if chosen.selects(r, r % ranks_per_node, ranks_per_node)]
    missing = tuple(r for r in wanted if r not in present)
    ranks = present | set(outside.values())
    from_one = bool(outside) and min(ranks) >= 1 and max(ranks) == world_size
    return RankSet(kept, extra, outside, missing, len(wanted), world_size, from_one, tuple(twice))
