"""The one rank-from-file-name rule (hpcprof.ranks), and that collect, the nsys/ncu/trace
commands and the analyses all use it (the names below used to give different ranks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcprof.ranks import rank_from_filename


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


def test_every_reader_uses_the_one_rule(tmp_path: Path) -> None:
    """collect's rank files, the manifest's rank column and trace loading agree on `rank_3`."""
    from hpcprof.analysis.trace.load import peek_rank
    from hpcprof.collect import rank_files

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
