"""`hpcprof nsys analyze` (hpcprof/analysis/nsys/rules.py) against `nsys analyze` of nsys 2022.4 itself.

The differential test generates exports with tests/differential/nsys_rules_exports.py (pageable,
sync and async memcpys and memsets, synchronisation calls with equal durations, gaps over 500 ms
on several devices, CUDA profiling overheads, dropped tables), runs nsys 2022.4's six rules on
each four times (nsys's defaults; rows=5 / gap=1 ms / threshold=80 % / chunks=97; a start/end
window over the middle 40 % of the export's GPU span; nvtx=<one of its NVTX ranges>) and compares
each CSV file with ours byte for byte (an empty file where nsys skips or finds nothing).
nsys 2022.4 is installed by tests/services/nsys.sh (as root); elsewhere the tests needing it skip
with the reason, except under CI=true.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_differential_nsys import NSYS_2022, Outcome, _nsys_2022

from hpcprof.analysis.nsys import rules
from hpcprof.cli import main

sys.path.insert(0, str(Path(__file__).parent / "differential"))
from nsys_exports import TIE_SEEDS  # noqa: E402
from nsys_rules_exports import derive_rules  # noqa: E402

EXPORTS = int(os.environ.get("HPCPROF_RULES_EXPORTS", "120"))
OPTION_SETS = {"default": rules.Options(), "tight": rules.Options(rows=5, gap_ms=1, threshold=80, chunks=97)}
WINDOW = (0.3, 0.7)      # the third option set: the middle of the export's GPU span
REAL = ["h200_campaign/ddp_ws2_rank0", "h200_campaign/ddp_ws2_rank1", "h200_campaign/seqpar_bf16_p4_rank3",
        "h200_seqpar_bf16/rank1"]


def _option_sets(db: Path) -> list[rules.Options]:
    """The fixed option sets and a time window over the middle of the export's GPU span."""
    with sqlite3.connect(db) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        spans = [con.execute(f'SELECT min(start), max("end") FROM {t}').fetchone()
                 for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY") if t in tables]
    lo = min((s[0] for s in spans if s[0] is not None), default=0)
    hi = max((s[1] for s in spans if s[1] is not None), default=0)
    window = rules.Options(start=int(lo + WINDOW[0] * (hi - lo)), end=int(lo + WINDOW[1] * (hi - lo)))
    return [*OPTION_SETS.values(), window, rules.Options(nvtx=_nvtx_name(db))]


def _nvtx_name(db: Path) -> str:
    """`text[@domain]` of the export's NVTX push/pop or start/end range name with a plain name (one
    nsys's argument syntax passes) whose first range is the longest (so that rules find something
    inside it); a missing name where there is none."""
    with sqlite3.connect(db) as con:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone():
            return "no_such_range"
        cols = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
        text = "coalesce(n.text, s.value)" if "textId" in cols else "n.text"
        join = "LEFT JOIN StringIds AS s ON s.id = n.textId" if "textId" in cols else ""
        ranges = con.execute(
            f"SELECT {text} || coalesce('@' || d.text, ''), n.start, n.\"end\" FROM NVTX_EVENTS AS n LEFT JOIN "
            f"(SELECT domainId, globalTid, text FROM NVTX_EVENTS WHERE eventType = 75) AS d ON n.domainId = "
            f"d.domainId AND n.globalTid >> 24 = d.globalTid >> 24 {join} WHERE n.eventType IN (59, 60, 70, 71) "
            f"AND n.\"end\" IS NOT NULL ORDER BY n.start").fetchall()
    first: dict[str, int] = {}
    for name, start, end in ranges:
        if name and name.replace("_", "").replace("@", "").replace(" ", "").isalnum():
            first.setdefault(name, end - start)
    return max(sorted(first), key=lambda n: first[n]) if first else "no_such_range"


def _spec(rule: rules.Rule, opts: rules.Options) -> str:
    """nsys 2022.4's `-r` argument of the rule with these options."""
    if opts == rules.Options():
        return rule.old_name
    if opts.start is not None:
        return f"{rule.old_name}:start={opts.start}:end={opts.end}"
    if opts.nvtx is not None:
        return f"{rule.old_name}:nvtx={opts.nvtx}"
    extra = {"gpu-starv": f"gap={opts.gap_ms}:rows={opts.rows}",
             "gpu-low-util": f"threshold={opts.threshold}:chunks={opts.chunks}:rows={opts.rows}"}
    return f"{rule.old_name}:{extra.get(rule.old_name, f'rows={opts.rows}')}"


def _run_nsys(nsys: Path, db: Path) -> None:
    """Every rule with every option set; nsys writes <db>_<rule>[_<args>].csv (empty when skipped)."""
    specs = [_spec(rule, opts) for opts in _option_sets(db) for rule in rules.RULES.values()]
    subprocess.run([str(nsys), "analyze", "--format", "csv", "--force-overwrite", "true", "-o",
                    str(db.with_suffix("")), "-r", ",".join(specs), str(db)],
                   capture_output=True, timeout=300, check=True)


def _ours(db: Path, rule: rules.Rule, opts: rules.Options) -> str:
    conn = rules.open_export(db)
    try:
        found = rules.run_rule(conn, rule, opts, str(db))
    finally:
        conn.close()
    buf = io.StringIO()
    if not isinstance(found, rules.Skipped):
        rules.write_csv(rule, found, buf)
    return buf.getvalue()


def _compare(db: Path, outcome: Outcome) -> None:
    for opts in _option_sets(db):
        for rule in rules.RULES.values():
            theirs = Path(f"{db.with_suffix('')}_{_spec(rule, opts).replace(':', '_')}.csv").read_text()
            outcome.add(db.name, _spec(rule, opts), theirs, _ours(db, rule, opts))


@pytest.fixture(scope="module")
def nsys() -> Path:
    found = _nsys_2022()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="module")
def rule_outcome(nsys: Path, fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Outcome, dict[str, int]]:
    """Our CSV of every rule vs nsys 2022.4's on the generated exports; how many findings nsys made."""
    work = tmp_path_factory.mktemp("rules")
    exports = [derive_rules(seed, fixtures_dir, work) for seed in range(TIE_SEEDS, TIE_SEEDS + EXPORTS)]
    with ThreadPoolExecutor(max_workers=2) as threads:
        list(threads.map(lambda db: _run_nsys(nsys, db), exports))
    outcome = Outcome()
    for db in exports:
        _compare(db, outcome)
    with_rows = {rule.name: sum(bool(Path(f"{db.with_suffix('')}_{rule.old_name}.csv").stat().st_size)
                                for db in exports) for rule in rules.RULES.values()}
    return outcome, with_rows


def test_rules_identical_to_nsys_2022_on_generated_exports(rule_outcome: tuple[Outcome, dict[str, int]],
                                                           record_counts) -> None:
    outcome, with_rows = rule_outcome
    record_counts(f"nsys analyze 2022.4 (run here), six rules x four option sets (defaults; rows=5, gap=1, "
                  f"threshold=80, chunks=97; a start/end window; an NVTX range): {outcome.compared} CSV files "
                  f"compared over {EXPORTS} generated exports, {outcome.identical} identical; exports with "
                  f"findings per rule (defaults): " + ", ".join(f"{k} {v}" for k, v in with_rows.items()))
    assert outcome.compared == EXPORTS * len(rules.RULES) * (len(OPTION_SETS) + 2)
    assert EXPORTS < 100 or min(with_rows.values()) >= 10        # every rule finds something somewhere
    assert not outcome.differing, f"{len(outcome.differing)} differ; first:\n" + "\n".join(outcome.differing[:5])


def test_real_exports_identical_to_nsys_2022(nsys: Path, fixtures_dir: Path, tmp_path: Path) -> None:
    """The committed H200 exports: nsys 2022.4 reads them, the CSVs are equal, and the sync-call
    rule lists exactly the export's cudaDeviceSynchronize/cudaStreamSynchronize calls."""
    for name in REAL:
        db = tmp_path / (name.replace("/", "__") + ".sqlite")
        db.write_bytes((fixtures_dir / "nsys" / f"{name}.sqlite").read_bytes())
        _run_nsys(nsys, db)
        outcome = Outcome()
        _compare(db, outcome)
        assert not outcome.differing, "\n".join(outcome.differing[:3])
        with sqlite3.connect(db) as con:
            calls = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN StringIds AS s "
                                "ON s.id = r.nameId WHERE s.value GLOB 'cuda[DS]*Synchronize*'").fetchone()[0]
        found = _ours(db, rules.RULES["cuda_api_sync"], rules.Options(rows=10**6)).splitlines()
        assert len(found) == (calls + 1 if calls else 0)


def test_cli_on_real_export(fixtures_dir: Path) -> None:
    """Every rule runs on a 2xH200 DDP rank export; findings are sane: sync calls longest first,
    every reported gap free of GPU operations on its device (checked in SQL on the export),
    low-utilisation rows under the threshold."""
    db = fixtures_dir / "nsys" / "h200_campaign" / "ddp_ws2_rank0.sqlite"
    res = CliRunner().invoke(main, ["nsys", "analyze", str(db), "--gap", "0", "--threshold", "80", "--rows", "1000"])
    assert res.exit_code == 0, res.output
    blocks = {b.split("\n", 1)[0].split()[-1]: b.split("\n")[2:] for b in res.stdout.strip().split("\n\n")}
    sync = [line.split(",") for line in blocks["cuda_api_sync"]]
    durations = [int(row[0]) for row in sync]
    assert durations and durations == sorted(durations, reverse=True)
    assert {row[4].split("_v")[0] for row in sync} <= {"cudaDeviceSynchronize", "cudaStreamSynchronize"}
    gaps = [[int(v) for v in line.split(",")] for line in blocks["gpu_gaps"]]
    assert len(gaps) > 10 and [g[0] for g in gaps] == list(range(1, len(gaps) + 1))
    with sqlite3.connect(db) as con:
        for _, duration, start, _, device, _ in gaps:
            busy = sum(con.execute(f'SELECT count(*) FROM {t} WHERE deviceId = ? AND start < ? AND "end" > ?',
                                   (device, start + duration, start)).fetchone()[0]
                       for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))
            assert busy == 0 and duration > 0
    util = [line.split(",") for line in blocks["gpu_time_util"]]
    assert util and all(0 <= float(u[1]) < 80 for u in util)


def test_missing_tables_give_nsys_message_and_exit_0(tmp_path: Path) -> None:
    db = tmp_path / "bare.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    res = CliRunner().invoke(main, ["nsys", "analyze", str(db), "-r", "cuda_memcpy_sync,gpu-starv,cuda_memset_sync"])
    assert res.exit_code == 0 and res.stdout == ""
    assert res.stderr.splitlines() == [
        f"SKIPPED: {db} could not be analyzed because it does not contain the required CUDA data. "
        "Does the application use CUDA runtime APIs?",
        f"SKIPPED: {db} could not be analyzed because it does not contain the required data. "
        "Does the application launch GPU operations?",
        f"SKIPPED: {db} could not be analyzed because it does not contain the required CUDA data. "
        "Does the application use CUDA runtime APIs?"]
    if NSYS_2022.exists():         # the same text as nsys's own SKIPPED lines
        out = subprocess.run([str(NSYS_2022), "analyze", "--format", "csv", "-r", "cuda-sync-memcpy,gpu-starv,"
                              "cuda-sync-memset", str(db)], capture_output=True, text=True, timeout=120).stdout
        assert [line for line in out.splitlines() if line.startswith("SKIPPED")] == res.stderr.splitlines()


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "notes.sqlite"
    bad.write_text("not a database")
    res = CliRunner().invoke(main, ["nsys", "analyze", str(bad)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "not an SQLite database" in res.stderr
    res = CliRunner().invoke(main, ["nsys", "analyze", str(bad), "-r", "gpu_idle"])
    assert res.exit_code == 2 and "unknown rule 'gpu_idle'" in res.output
    res = CliRunner().invoke(main, ["nsys", "analyze", str(bad), "--start", "9", "--end", "3"])
    assert res.exit_code == 2 and "--start 9 is after --end 3" in res.output
