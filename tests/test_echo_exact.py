"""`hpcprof nsys slowdown --match echo` against Echo's own analyse.py output (tests/fixtures/echo,
made by Echo's unmodified script: see tests/fixtures/SOURCES.md) on the real GPT-2 exports of the
2×H200 campaign (world size 1: p000 rank 0; world size 2: p001 ranks 0 and 1), cell for cell."""

from __future__ import annotations

import json
import lzma
import shutil
import sqlite3
from pathlib import Path

import openpyxl
import pandas as pd
import pytest
from click.testing import CliRunner

from hpcprof.cli import main
from hpcprof.tools.nsys.analysis import echo_match as em

CAMPAIGN = "gpu/h200_window_campaign/echo-slowdown/20261122-234316-b2f418-{}/profiles/nsys/rank{}.sqlite.xz"
#: Echo's compute kernels (analyse.py's query_other), counted by SQL independently of hpcprof
ECHO_COMPUTE = """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
JOIN StringIds s ON s.id = k.shortName JOIN StringIds d ON d.id = k.demangledName
WHERE s.value NOT LIKE '%nccl%' AND k."end" - k.start > 0"""


@pytest.fixture(scope="module")
def exports(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """ws1 (p000 rank 0), ws2r0 and ws2r1 (p001 ranks 0, 1), unpacked."""
    out = tmp_path_factory.mktemp("echo_exports")
    files = {}
    for key, run, rank in (("ws1", "p000", 0), ("ws2r0", "p001", 0), ("ws2r1", "p001", 1)):
        target = out / f"{key}_rank{rank}.sqlite"
        with lzma.open(repo / "tests" / "fixtures" / CAMPAIGN.format(run, rank)) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        files[key] = target
    return files


def slowdown(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["nsys", "slowdown", *args])
    return res.exit_code, res.output


def echo_sqlite(repo: Path, rank: int) -> pd.DataFrame:
    """Echo's table at full precision (its res/slowdown_results.sqlite; the .xlsx keeps 16 digits)."""
    with sqlite3.connect(repo / "tests" / "fixtures" / "echo" / f"slowdown_results.rank{rank}.sqlite") as conn:
        return pd.read_sql_query("SELECT * FROM stats_output_ws2_device_0_slowdown", conn)


def cells(path: Path) -> list[list[object]]:
    return [[c.value for c in row] for row in openpyxl.load_workbook(path).active.iter_rows()]


def test_match_echo_equals_echos_own_table_cell_for_cell(repo: Path, exports: dict[str, Path], tmp_path: Path,
                                                          record_counts) -> None:
    code, out = slowdown("--baseline", str(exports["ws1"]), "--distributed", str(exports["ws2r0"]),
                         str(exports["ws2r1"]), "--match", "echo", "-o", str(tmp_path / "echo.xlsx"))
    assert code == 0, out
    assert "match: echo (launch index + equal demangled name" in out
    for rank in (0, 1):
        gold = repo / "tests" / "fixtures" / "echo" / f"slowdown_stats_output_device_0.rank{rank}.xlsx"
        ours = tmp_path / f"echo_rank{rank}_device_0.xlsx"
        assert cells(ours) == cells(gold)
        g, o = pd.read_excel(gold), pd.read_excel(ours)
        assert list(o.columns) == list(g.columns) == ["id", "kShortName", "kDemangledName", "ground_truth",
                                                        "duration", "overlap_ratio", "slowdown"]
        assert o.dtypes.to_dict() == g.dtypes.to_dict()
        pd.testing.assert_frame_equal(o, g, check_exact=True)
        exact = em.echo_match(exports["ws1"], {exports[f"ws2r{rank}"]: rank}).tables[(rank, 0)]
        pd.testing.assert_frame_equal(exact, echo_sqlite(repo, rank), check_exact=True)
        record_counts(f"Echo analyse.py vs --match echo, ws2 rank {rank}: {len(g)} rows, "
                      f"{len(g) * len(g.columns)} cells identical, mean slowdown {g['slowdown'].mean():.4f}")


def test_every_run_states_its_rule_and_echos_drops(repo: Path, exports: dict[str, Path], tmp_path: Path) -> None:
    compute = sum(sqlite3.connect(exports[k]).execute(ECHO_COMPUTE).fetchone()[0] for k in ("ws2r0", "ws2r1"))
    kept = sum(len(pd.read_excel(repo / "tests" / "fixtures" / "echo" / f"slowdown_stats_output_device_0.rank{r}.xlsx"))
               for r in (0, 1))
    assert (compute, kept) == (974, 160)
    code, out = slowdown("--baseline", str(exports["ws1"]), "--distributed", str(exports["ws2r0"]),
                         str(exports["ws2r1"]), "--format", "csv", "-o", str(tmp_path / "hpcprof.csv"))
    assert code == 0, out
    matched = int((pd.read_csv(tmp_path / "hpcprof.csv")["status"] == "matched").sum())
    assert matched == 972
    assert (f"match: hpcprof (name + occurrence); Echo's rule keeps {kept} and drops {compute - kept} of "
            f"{compute} compute kernel(s) of the distributed run; hpcprof's rule matches {matched}") in out


@pytest.mark.parametrize("args, message", [
    (["--match", "echo"], "--match echo writes files: add -o FILE.csv or -o FILE.xlsx"),
    (["--match", "echo", "-o", "{out}", "--baseline", "{ws1}"], "--match echo: give exactly one --baseline export"),
])
def test_match_echo_bad_input_is_one_line(exports: dict[str, Path], tmp_path: Path, args: list[str],
                                          message: str) -> None:
    base = ["--baseline", str(exports["ws1"]), "--distributed", str(exports["ws2r0"])]
    code, out = slowdown(*base, *[a.format(ws1=exports["ws1"], out=tmp_path / "x.xlsx") for a in args])
    assert code == 2
    assert message in out and "Traceback" not in out
    assert not (tmp_path / "x.xlsx").exists()


def test_collect_rule_from_the_experiment(repo: Path, exports: dict[str, Path]) -> None:
    """`analysis.slowdown_match` picks collect's table: Echo's rows (rank, device in front) or
    hpcprof's, each with the `match` column naming the rule."""
    from hpcprof.config.experiment import Experiment
    from hpcprof.core.errors import UserError
    from hpcprof.core.models import validate
    from hpcprof.tools.nsys.analysis import distributed as dist
    from hpcprof.tools.nsys.stats.db import Export

    workload = {"kind": "ddp"}
    assert validate(Experiment, {"name": "e", "workload": workload}, "e").analysis.slowdown_match == "hpcprof"
    with pytest.raises(UserError, match="slowdown_match"):
        validate(Experiment, {"name": "e", "workload": workload, "analysis": {"slowdown_match": "id"}}, "e")
    base, files = {exports["ws1"]: 0}, {exports["ws2r0"]: 0, exports["ws2r1"]: 1}
    with Export(exports["ws1"]) as b, Export(exports["ws2r0"]) as r0, Export(exports["ws2r1"]) as r1:
        table = dist.slowdown(dist.load_activity([b]), dist.load_activity([r0, r1], {str(p): r for p, r in files.items()}))
    lines: list[str] = []
    echo = em.by_rule("echo", table, base, files, lines.append)
    gold = pd.concat([echo_sqlite(repo, r) for r in (0, 1)], ignore_index=True)
    assert list(echo.columns) == ["rank", "device", *gold.columns, "match"]
    pd.testing.assert_frame_equal(echo[list(gold.columns)], gold, check_exact=True)
    assert set(echo["match"]) == {"echo"} and echo["rank"].tolist() == [0] * 80 + [1] * 80
    ours = em.by_rule("hpcprof", table, base, files, lines.append)
    assert set(ours["match"]) == {"hpcprof"} and len(ours) == len(table)
    assert lines[0].startswith("echo: match: echo") and "drops 814 of 974" in lines[1]


def test_collect_with_slowdown_match_echo_stores_echos_table(repo: Path, tmp_path: Path) -> None:
    """The campaign's two runs collected with `analysis.slowdown_match: echo` in the ws2 run's
    experiment: results/echo_slowdown is Echo's table of both ranks."""
    from hpcprof.run.results import read_table

    source = repo / "tests" / "fixtures" / "gpu" / "h200_window_campaign" / "echo-slowdown"
    work = tmp_path / "work" / "echo-slowdown"
    shutil.copytree(source, work)
    for packed in list(work.rglob("*.xz")):
        with lzma.open(packed) as src, packed.with_suffix("").open("wb") as dst:
            shutil.copyfileobj(src, dst)
        packed.unlink()
    config_path = work / "20261122-234316-b2f418-p001" / "config.json"
    config = json.loads(config_path.read_text())
    config["experiment"]["analysis"] = {"slowdown_match": "echo"}
    config_path.write_text(json.dumps(config))
    res = CliRunner().invoke(main, ["collect", "--workdir", str(tmp_path / "work")])
    assert res.exit_code == 0, res.output
    assert "echo: match: echo (launch index" in res.output
    table = read_table(config_path.parent, "echo_slowdown")
    assert table is not None
    gold = pd.concat([echo_sqlite(repo, r) for r in (0, 1)], ignore_index=True)
    pd.testing.assert_frame_equal(table[list(gold.columns)], gold, check_exact=True, check_dtype=False)
    assert set(table["match"]) == {"echo"}


def test_match_echo_reproduces_each_quirk(repo: Path, tmp_path: Path) -> None:
    """Tiny exports made by tests/fixtures/echo/make_quirk_exports.py, with Echo's own output on
    them (NCCL case-insensitive, same (start, end) summed twice, duration 0, NULL demangled name,
    shifted ids, a device without NCCL: empty overlap_ratio and slowdown, integer 0 slowdown)."""
    quirks = repo / "tests" / "fixtures" / "echo" / "quirks"
    code, out = slowdown("--baseline", str(quirks / "ws1.sqlite"), "--distributed", str(quirks / "ws2.sqlite"),
                         "--match", "echo", "-o", str(tmp_path / "q.xlsx"))
    assert code == 0, out
    assert "keeps 7 and drops 3 of 10 compute kernel(s)" in out
    with sqlite3.connect(quirks / "slowdown_results.sqlite") as conn:
        for device in (0, 1):
            gold = quirks / f"slowdown_stats_output_device_{device}.xlsx"
            assert cells(tmp_path / f"q_rank0_device_{device}.xlsx") == cells(gold)
            exact = pd.read_sql_query(f"SELECT * FROM stats_output_ws2_device_{device}_slowdown", conn)
            ours = em.echo_match(quirks / "ws1.sqlite", {quirks / "ws2.sqlite": 0}).tables[(0, device)]
            pd.testing.assert_frame_equal(ours, exact, check_exact=True)
