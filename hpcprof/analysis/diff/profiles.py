"""The GPU time of one profile per iteration of its measured window, for `hpcprof diff`: an nsys
export (.sqlite, or .nsys-rep exported with the nsys on PATH), a Kineto trace (.json, .json.gz),
several per-rank files (a quoted glob), a directory of them, or an hpcprof run directory (its
profiles/nsys exports, else its profiles/torch traces).

The window and its iterations are those of the profile's own analyses (nsys/window.py: `--window
auto` as collect's, `capture`, `nvtx:NAME`; trace/window.py: the ProfilerSteps, else the steps found
in the kernels). A GPU operation (kernel, memcpy, memset) belongs to the iteration whose host
interval its launch falls in (the latest iteration starting at or before the launch, up to its end:
the rule that projects an NVTX range or a ProfilerStep onto the GPU), with its whole duration;
one launched outside every iteration is outside the window. An operation whose launching call is
not in the profile (a Kineto trace's kernels with no CPU event of their correlation id) belongs to
the iteration whose GPU span its start falls in. Under `capture` (or a rank whose
window is the whole capture) a rank has one iteration holding all its operations.

`samples` rows (one per rank, iteration, section and name with any time):
- rank, iteration: the global rank; the iteration's number in its window;
- section: `category` (hpcprof.analysis.categories, the run's own rules), `kernel` (the
  operation's name), `collective` (NCCL kernels by collective: nccl.collective_of);
- name: the category, kernel name or collective;
- ns: GPU time (ns) of the operations of that name launched in the iteration on that rank;
- instances: how many there were.
`iterations` rows: rank, iteration, gpu_ns (the iteration's GPU span: first start to last end).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

NSYS, TRACE = "nsys", "Kineto trace"
#: the profiler (hpcprof.profilers) whose diff loader reads each kind
TOOLS = {NSYS: "nsys", TRACE: "torch"}
NSYS_SUFFIXES = (".sqlite", ".nsys-rep")
TRACE_SUFFIXES = (".json", ".json.gz")
SECTIONS = ("category", "kernel", "collective")
SAMPLE_COLUMNS = ["rank", "iteration", "section", "name", "ns", "instances"]
ITERATION_COLUMNS = ["rank", "iteration", "gpu_ns"]


#: the spellings of one kernel that nsys (cu++filt) and Kineto (the GNU demangler) write differently
_ANONYMOUS = re.compile(r"<unnamed>|\(anonymous namespace\)")
_LAMBDA = re.compile(r"\[lambda\(([^()]*)\) \(instance (\d+)\)\]|\{lambda\(([^()]*)\)#(\d+)\}")
_CAST = re.compile(r"\((?:unsigned |signed )?(?:char|short|int|long|long long)\)(-?\d+)")
_SUFFIX = re.compile(r"\b(\d+)(?:ull|ul|ll|u|l)\b")
_CONST = re.compile(r"\bconst\s+([\w:]+)")
_COPIES = {"memcpy": re.compile(r"^\[CUDA memcpy|^Memcpy\b"), "memset": re.compile(r"^\[CUDA memset|^Memset\b")}


def kernel_key(name: str) -> str:
    """What one GPU operation's name is under either tool, for matching a kernel across an nsys
    export and a Kineto trace: casts and integer suffixes of template arguments, `(bool)0`/`false`,
    anonymous namespaces, lambdas, `const T`/`T const`, `void`, whitespace and every parameter list
    (cu++filt writes `T1`, the GNU demangler the types) written one way; copies and sets by kind."""
    for kind, pattern in _COPIES.items():
        if pattern.search(name):
            return f"[{kind}]"
    key = _ANONYMOUS.sub("{anonymous}", name)
    key = _LAMBDA.sub(lambda m: f"{{lambda#{m[2] or m[4]}}}", key)
    key = key.replace("(bool)0", "false").replace("(bool)1", "true")
    key = _SUFFIX.sub(r"\1", _CAST.sub(r"\1", key))
    key = re.sub(r"\bvoid\s+", "", _CONST.sub(r"\1 const", key))
    depth, kept = 0, []
    for char in key:                    # every (...) group: parameter lists, `operator()`
        depth += char == "("
        if not depth:
            kept.append(char)
        depth -= char == ")" and depth > 0
    return re.sub(r"\s+", "", "".join(kept))


class DiffInputError(Exception):
    """A profile `hpcprof diff` cannot read: the message says why and what to give instead."""


@dataclass
class Profile:
    """One side of a diff: its files, window label(s), iterations and samples."""

    files: list[Path]
    windows: list[str]          # the window label of each rank, distinct, sorted
    iterations: pd.DataFrame    # ITERATION_COLUMNS
    samples: pd.DataFrame       # SAMPLE_COLUMNS

    @property
    def window(self) -> str:
        """The window's name (the ranks' names joined where they differ)."""
        return ",".join(self.windows)

    @property
    def iterated(self) -> bool:
        """Whether the window has iterations (not the whole capture)."""
        from hpcprof.core.catalog import CAPTURE_WINDOW

        return CAPTURE_WINDOW not in self.windows


def _kind_of(path: Path) -> str | None:
    name = path.name
    return NSYS if name.endswith(NSYS_SUFFIXES) else TRACE if name.endswith(TRACE_SUFFIXES) else None


def _run_files(run: Path) -> list[Path]:
    """A run directory's profiles: its nsys exports (a .nsys-rep by the .sqlite collect exported of
    it, under derived/nsys, where there is one), else its Kineto traces."""
    nsys = run / "profiles" / "nsys"
    sqlite = sorted(nsys.glob("*.sqlite"))
    exported = {p.stem: p for p in (run / "derived" / "nsys").glob("*.sqlite")}
    reps = [exported.get(p.stem, p) for p in sorted(nsys.glob("*.nsys-rep")) if p.stem not in {s.stem for s in sqlite}]
    if sqlite or reps:
        return sqlite + reps
    torch = run / "profiles" / "torch"
    return _traces_first(sorted(p for p in torch.iterdir() if _kind_of(p) == TRACE)) if torch.is_dir() else []


def _traces_first(files: list[Path]) -> list[Path]:
    """A directory's profile files: its `*trace.json[.gz]` files where it has any (torch.profiler's
    names: other JSON beside them, a trainer's timings, is no trace), else all of them."""
    traces = [p for p in files if p.name.endswith(("trace.json", "trace.json.gz"))]
    return traces or files


def profile_files(paths: Sequence[Path]) -> tuple[str, list[Path]]:
    """(kind, files) of a profile given as files, one directory of them or a run directory."""
    if not paths:
        raise DiffInputError("no file: give an export, a trace, a quoted glob of per-rank files or a directory")
    if len(paths) == 1 and paths[0].is_dir():
        folder = paths[0]
        run = (folder / "config.json").is_file() or (folder / "profiles").is_dir()
        found = sorted(p for p in folder.iterdir() if _kind_of(p))
        files = _run_files(folder) if run else _traces_first(found)
        if not run and {_kind_of(p) for p in files} == {TRACE} and any(_kind_of(p) == NSYS for p in found):
            raise DiffInputError(f"{folder}: holds nsys exports and Kineto traces; give one kind as files (a quoted "
                                 f"glob such as '{folder}/*.sqlite'), not the directory")
        if not files:
            raise DiffInputError(f"{folder}: no nsys export (.sqlite, .nsys-rep) or Kineto trace (.json, .json.gz) "
                                 f"{'in its profiles/' if run else 'in it'}; give the profile files")
    else:
        files = list(paths)
    for path in files:
        if not path.exists():
            raise DiffInputError(f"{path}: no such file")
        if path.is_dir():
            raise DiffInputError(f"{path}: a directory among files; give the directory alone")
    seen: dict[str, Path] = {}
    for path in files:   # one rank's file twice (the same path, a link, a glob and a name) would be counted twice
        if (other := seen.setdefault(os.path.realpath(path), path)) is not path:
            raise DiffInputError(f"{path}: given twice (also as {other}); give each rank's file once")
    kinds = {_kind_of(p) for p in files}
    if None in kinds:
        odd = next(p for p in files if _kind_of(p) is None)
        raise DiffInputError(f"{odd}: unknown format; give an nsys export (.sqlite, .nsys-rep) or a Kineto trace "
                             "(.json, .json.gz)")
    if len(kinds) > 1:
        raise DiffInputError(f"{files[0].parent}: nsys exports and Kineto traces mixed; give one kind per side")
    return kinds.pop() or NSYS, files


def load_profile(paths: Sequence[Path], window: str, include_last_step: bool = False) -> Profile:
    """The profile of `paths` over the window `window` (auto, capture or nvtx:NAME), read by the diff
    loader of its tool (hpcprof.profilers.Profiler.diff); a trace's last ProfilerStep is dropped (as
    HTA does) unless `include_last_step`."""
    from hpcprof import profilers
    from hpcprof.core.lazy import load_target

    kind, files = profile_files(paths)
    loader = profilers.get(TOOLS[kind]).diff
    assert loader is not None, f"the tool of {kind} has a diff loader"
    profile: Profile = load_target(loader)(files, window, include_last_step)
    return profile


def _within(rank: np.ndarray, at: np.ndarray, its_rank: np.ndarray, its_number: np.ndarray, lo: np.ndarray,
            hi: np.ndarray) -> np.ndarray:
    """For each time `at` of a rank (NaN: unknown) the number of the iteration of that rank whose
    interval [lo, hi] holds it (the latest starting at or before it), -1 for none."""
    import numpy as np

    out = np.full(len(rank), -1, dtype=np.int64)
    for r in np.unique(its_rank).tolist():
        mine = np.flatnonzero(its_rank == r)
        mine = mine[np.argsort(lo[mine], kind="stable")]
        ops = np.flatnonzero(rank == r)
        found = np.searchsorted(lo[mine], at[ops], side="right") - 1
        inside = (found >= 0) & (at[ops] <= hi[mine][np.maximum(found, 0)])     # NaN: never inside
        out[ops[inside]] = its_number[mine][found[inside]]
    return out


def iteration_of(rank: np.ndarray, launch: np.ndarray, start: np.ndarray, its: dict[str, np.ndarray]) -> np.ndarray:
    """The iteration of each operation (its rank, launch time, NaN where its launch is not in the
    profile, and GPU start) among `its` (rank, iteration, cpu_start, cpu_end, start, end): the one
    its launch falls in; for an operation launched outside the profile, the one whose GPU span its
    start falls in; -1 for none."""
    import numpy as np

    out = _within(rank, launch, its["rank"], its["iteration"], its["cpu_start"], its["cpu_end"])
    unknown = np.isnan(launch)
    out[unknown] = _within(rank[unknown], start[unknown], its["rank"], its["iteration"], its["start"], its["end"])
    return out


def samples_of(rank: np.ndarray, iteration: np.ndarray, names: np.ndarray, short: np.ndarray, ns: np.ndarray,
               categories: np.ndarray) -> pd.DataFrame:
    """SAMPLE_COLUMNS of the operations in an iteration (iteration >= 0)."""
    import numpy as np
    import pandas as pd

    from hpcprof.analysis.nccl import collective_of, nccl_name

    keep = iteration >= 0
    ops = pd.DataFrame({"rank": rank[keep], "iteration": iteration[keep], "ns": ns[keep],
                        "kernel": names[keep], "category": categories[keep]})
    comm = np.fromiter(map(nccl_name, names[keep]), dtype=bool, count=int(keep.sum()))
    ops["collective"] = None
    ops.loc[comm, "collective"] = [collective_of(s, n) for s, n in zip(short[keep][comm], names[keep][comm], strict=True)]
    parts = []
    for section in SECTIONS:
        got = ops.dropna(subset=[section]).groupby(["rank", "iteration", section], sort=True)["ns"].agg(["sum", "size"])
        parts.append(pd.DataFrame({"rank": got.index.get_level_values(0), "iteration": got.index.get_level_values(1),
                                   "section": section, "name": got.index.get_level_values(2).astype(str),
                                   "ns": got["sum"].to_numpy(np.int64), "instances": got["size"].to_numpy(np.int64)}))
    return pd.concat(parts, ignore_index=True)[SAMPLE_COLUMNS]


def capture_iterations(rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """One iteration (0) per rank: its operations' first start to last end."""
    import pandas as pd

    ops = pd.DataFrame({"rank": rank, "start": start, "end": end}).groupby("rank", sort=True)
    span = ops["end"].max() - ops["start"].min()
    return pd.DataFrame({"rank": span.index.to_numpy(), "iteration": 0, "gpu_ns": span.to_numpy().round()
                         .astype("int64")})
