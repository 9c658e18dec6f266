"""The one rank-from-file-name rule (hpcprof.run.ranks), and that collect, the nsys/ncu/trace
commands and the analyses all use it (the names below used to give different ranks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcprof.analysis.nccl import collective_kind
from hpcprof.run.ranks import rank_from_filename


@pytest.mark.parametrize(("name", "rank"), [
    ("rank3.nsys-rep", 3),                  # the rank wrapper's names
    ("rank0.1234.pt.trace.json.gz", 0),     # torch.profiler's <rank>.<pid> names: the first number
    ("rank_3.sqlite", 3),                   # was ignored by collect, rank 3 for `hpcprof nsys nccl`
    ("report_rank_12.sqlite", 12),
    ("ncu_Rank-7.csv", 7),
    ("profile.rank0.details.csv", 0),
    ("profile.csv", None),
    ("rank_wrapper.sh", None),              # a run directory's wrapper is no rank file
    ("ranks.txt", None),
])
def test_rank_from_filename(name: str, rank: int | None) -> None:
    assert rank_from_filename(Path("/runs/rank9") / name) == rank   # the directory never counts
    assert rank_from_filename(name) == rank


@pytest.mark.parametrize(("name", "kind"), [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)", "AllReduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "AllGather"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)", "SendRecv"),
    ("ncclKernel_Broadcast", "Broadcast"),
    ("ncclKernel_Broadcast\n", "Broadcast"),      # `$`: before a last newline too
    ("ncclKernel_", None), ("ncclDevKernel_é_x", None), ("nccl_AllReduce", None), ("ampere_sgemm", None),
    (None, None), (3.5, None),
])
def test_collective_kind_is_the_name_rule(name: object, kind: str | None) -> None:
    assert collective_kind(name) == kind


def test_every_reader_uses_the_one_rule(tmp_path: Path) -> None:
    """collect's rank files, the manifest's rank column and trace loading agree on `rank_3`."""
    from hpcprof.collect import rank_files
    from hpcprof.tools.torch.analysis.load import peek_rank

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name in ("rank_3.sqlite", "rank1.nsys-rep", "notes.txt"):
        (profiles / name).write_text("x")
    problems: list[object] = []
    listed = rank_files(profiles, problems.append)
    assert {Path(p).name: rank for p, rank in listed.items()} == {"rank1.nsys-rep": 1, "rank_3.sqlite": 3}
    assert [Path(p).name for p in listed] == ["rank1.nsys-rep", "rank_3.sqlite"]
    assert problems == []
    trace = tmp_path / "worker_Rank-5.pt.trace.json"
    trace.write_text('{"traceEvents": []}')
    assert peek_rank(trace) == 5


def test_no_other_rank_pattern_in_the_package() -> None:
    """No module writes its own `rank(\\d+)` pattern again."""
    import hpcprof

    root = Path(hpcprof.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "ranks.py" and ("rank(\\d+)" in p.read_text() or "rank[-_]?(\\d+)" in p.read_text()
                                              or "rank[_-]?(\\d+)" in p.read_text())]
    assert offenders == []


# -- the rank set (check_rank_set): one place for collect and the analysis commands -------------------

def check(names: list[str], world: int | None = None, **options: object) -> tuple[dict[str, int | None], str | None]:
    from hpcprof.run.rank_sets import check_rank_set

    found = check_rank_set([(n, rank_from_filename(n)) for n in names], world, **options)
    return found.files, found.summary()


def test_a_second_file_of_a_rank_is_left_out_the_wrappers_name_kept() -> None:
    files, line = check(["r/report_rank_1.sqlite", "r/rank0.sqlite", "r/rank1.sqlite", "r/rank01.sqlite"], 2)
    assert files == {"r/rank0.sqlite": 0, "r/rank1.sqlite": 1}
    assert line == ("rank 1 has two files: rank1.sqlite used, report_rank_1.sqlite left out; "
                    "rank 1 has two files: rank1.sqlite used, rank01.sqlite left out")


def test_the_same_file_twice_and_a_link_to_it(tmp_path: Path) -> None:
    (tmp_path / "rank0.sqlite").write_text("x")
    (tmp_path / "copy_rank_0.sqlite").symlink_to("rank0.sqlite")
    import os

    files, line = check([str(tmp_path / "rank0.sqlite"), str(tmp_path / "copy_rank_0.sqlite"), "x.sqlite", "./x.sqlite"],
                        identity=os.path.realpath)                       # as the analysis commands check
    assert check(["x.sqlite", "./x.sqlite"])[1] == "x.sqlite given twice"    # collect's: the path alone
    assert files == {str(tmp_path / "rank0.sqlite"): 0, "x.sqlite": None}
    assert line == "copy_rank_0.sqlite given twice; x.sqlite given twice"


def test_a_report_and_its_export_are_one_rank_file_where_the_tool_says_so() -> None:
    names = ["r/rank0.nsys-rep", "r/rank0.sqlite", "r/rank1.nsys-rep"]
    assert check(names, 2, report_and_export=True) == ({n: rank_from_filename(n) for n in names}, None)
    assert check(names, 2)[1] == "rank 0 has two files: rank0.nsys-rep used, rank0.sqlite left out"


def test_outside_the_world_numbered_from_1_and_missing_in_one_line() -> None:
    from hpcprof.run.ranks import RankSelection

    assert check(["rank0.sqlite", "rank1.sqlite", "rank7.sqlite"], 2) == (
        {"rank0.sqlite": 0, "rank1.sqlite": 1}, "1 file(s) of ranks outside the world of 2 left out: rank7.sqlite (rank 7)")
    assert check(["rank1.sqlite", "rank2.sqlite"], 2)[1] == (
        "the rank files are numbered from 1 (1-2) for a world of 2 ranks, which count from 0 as MPI's do: "
        "rank2.sqlite left out (outside the world), rank 0: no file")
    files, line = check(["rank0.sqlite", "rank2.sqlite", "rank9.sqlite"], 10_000)
    assert line == "9,997 of 10,000 profiled ranks have no file (ranks 1, 3-8, 10-9999: no file)"
    assert check(["rank0.sqlite", "rank2.sqlite"], 4, selection=RankSelection("every:2")) == (
        {"rank0.sqlite": 0, "rank2.sqlite": 2}, None)                 # ranks 1 and 3 are not profiled


def test_missing_ranks_grouped_by_cause_each_log_as_rank_n() -> None:
    from hpcprof.run.rank_sets import check_rank_set

    def cause(rank: int) -> str:
        return f"no profile written (see logs/rank{rank}.log)" if rank % 2 else "no rank log: the rank never started"

    found = check_rank_set([("rank0.sqlite", 0)], 6)
    assert found.missing == (1, 2, 3, 4, 5)
    assert found.summary(cause) == ("5 of 6 profiled ranks have no file (ranks 1, 3, 5: no profile written (see "
                                    "logs/rank<N>.log); ranks 2, 4: no rank log: the rank never started)")
    assert check_rank_set([("rank0.sqlite", 0)], 2).summary(cause) == "rank 1: no profile written (see logs/rank1.log)"
