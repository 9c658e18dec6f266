"""`hpcprof nsys analyze` (hpcprof/tools/nsys/stats/rules.py) against `nsys analyze` of nsys 2022.4 itself
(the 2022.4 rule names) and against nsys 2025.3.1's committed gold (the 2025 rule names).

The differential test generates exports with tests/differential/nsys_rules_exports.py (pageable,
sync and async memcpys and memsets, synchronisation calls with equal durations, gaps over 500 ms
on several devices, CUDA profiling overheads, dropped tables), runs nsys 2022.4's six rules on
each four times (nsys's defaults; rows=5 / gap=1 ms / threshold=80 % / chunks=97; a start/end
window over the middle 40 % of the export's GPU span with rows=-1; nvtx=<one of its NVTX ranges>;
tests/differential/nsys_rules_exports.option_sets) and compares
each CSV file with ours byte for byte (an empty file where nsys skips or finds nothing). nsys's
files of all 520 exports are kept in tests/fixtures/nsys/rules_gold_2022.4.tar.xz
(tests/differential/nsys_rules_2022.py); nsys runs again here on every LIVE_EVERY-th export, whose
files must equal the kept ones byte for byte.
nsys 2022.4 is installed by tests/services/nsys.sh (as root); elsewhere the tests needing it skip
with the reason, except under CI=true. The nsys 2025.3.1 gold (tests/fixtures/nsys/
rules_gold_2025.3.1.tar.xz, made on the GPU machine by benchmarks/gpu/nsys_rules_gold.sh over the
same 520 exports with the defaults and the rows=5 option set; rules_options_gold_2025.3.1.tar.xz, made by
benchmarks/gpu/nsys_rules_gold_options.sh, with the window, the NVTX range, its second occurrence
(nvtx=NAME/1), process= and thread=) needs no nsys: those comparisons never skip.
"""

from __future__ import annotations

import io
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_differential_nsys import LIVE_EVERY, NSYS_2022, SPAWN, Outcome, _nsys_2022, gold_texts

from hpcprof.cli import main
from hpcprof.tools.nsys.stats import rules

sys.path.insert(0, str(Path(__file__).parent / "differential"))
from nsys_exports import TIE_SEEDS  # noqa: E402
from nsys_rules_2022 import run_nsys  # noqa: E402
from nsys_rules_exports import SETS_2022, SETS_2025, derive_rules, option_sets, rule_spec  # noqa: E402

EXPORTS = int(os.environ.get("HPCPROF_RULES_EXPORTS", "520"))
GOLD_2025 = "rules_gold_2025.3.1.tar"     # tests/fixtures/nsys/, unpacked from .tar.xz by fixtures_dir
GOLD_2025_OPTIONS = "rules_options_gold_2025.3.1.tar"  # the other options' gold (nsys_rules_gold_options.sh)
GOLD_2025_EXPORTS = 520                   # seeds TIE_SEEDS .. TIE_SEEDS + 519
KEPT_2022 = "rules_gold_2022.4.tar"       # nsys 2022.4's files of the EXPORTS exports (nsys_rules_2022.py)
REAL = ["h200_campaign/ddp_ws2_rank0", "h200_campaign/ddp_ws2_rank1", "h200_campaign/seqpar_bf16_p4_rank3",
        "h200_seqpar_bf16/rank1"]


def _options(args: dict[str, int | str]) -> rules.Options:
    """rules.Options of nsys's rule arguments."""
    names = {"gap": "gap_ms"}
    return rules.Options(**{names.get(key, key): value for key, value in args.items()})  # type: ignore[arg-type]


def _ours(db: Path, rule: rules.Rule, opts: rules.Options) -> str:
    (found,) = _ours_many(db, [(rule, opts)])
    return found


def _ours_many(db: Path, jobs: list[tuple[rules.Rule, rules.Options]]) -> list[str]:
    """Our CSV of each (rule, options) on `db`, the rules run over one connection of the export as
    `hpcprof nsys analyze` runs its rules (the export is opened read-only and immutable)."""
    conn = rules.open_export(db)
    out = []
    try:
        for rule, opts in jobs:
            found = rules.run_rule(conn, rule, opts, str(db))
            buf = io.StringIO()
            if not isinstance(found, rules.Skipped):
                rules.write_csv(rule, found, buf)
            out.append(buf.getvalue())
    finally:
        conn.close()
    return out


def _compare(db: Path, outcome: Outcome, theirs: dict[str, str] | None = None) -> None:
    """Ours against nsys's files of `db` (`theirs`: by file name; the files beside it by default)."""
    sets = option_sets(db)
    jobs = [(spec, rule, _options(sets[name])) for name in SETS_2022 for rule in rules.RULES_2022.values()
            for spec in [rule_spec(rule.name, sets[name])]]
    mine = _ours_many(db, [(rule, opts) for _, rule, opts in jobs])
    for (spec, _, _), ours in zip(jobs, mine, strict=True):
        name = f"{db.stem}_{spec.replace(':', '_')}.csv"
        outcome.add(db.name, spec, theirs[name] if theirs is not None else (db.parent / name).read_text(), ours)


def _compared(args: tuple[Path, dict[str, str], bool]) -> tuple[Outcome, Outcome]:
    """One export in a worker process: ours against nsys's files (those it wrote here where `live`,
    else its kept ones, `kept`), and the kept files against those it wrote here."""
    db, kept, live = args
    outcome, kept_outcome = Outcome(), Outcome()
    _compare(db, outcome, None if live else kept)
    if live:
        for name, text in kept.items():
            kept_outcome.add(db.name, name, (db.parent / name).read_text(), text)
    return outcome, kept_outcome


def _merge(parts: Iterable[Outcome]) -> Outcome:
    """The outcomes of several exports as one."""
    total = Outcome()
    for part in parts:
        total.compared += part.compared
        total.identical += part.identical
        total.differing += part.differing
    return total


def _derive(args: tuple[int, Path, Path]) -> Path:
    return derive_rules(*args)


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    """Two worker processes (spawned: see SPAWN) that derive the exports and run our rules on them."""
    with ProcessPoolExecutor(max_workers=2, mp_context=SPAWN) as workers:
        yield workers


@pytest.fixture(scope="module")
def nsys() -> Path:
    found = _nsys_2022()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="module")
def rule_exports(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory, pool: ProcessPoolExecutor) -> list[Path]:
    """The generated exports, seeds TIE_SEEDS .. in order."""
    work = tmp_path_factory.mktemp("rules")
    seeds = range(TIE_SEEDS, TIE_SEEDS + EXPORTS)
    return list(pool.map(_derive, [(seed, fixtures_dir, work) for seed in seeds], chunksize=8))


@pytest.fixture(scope="module")
def rule_outcome(rule_exports: list[Path], fixtures_dir: Path,
                 pool: ProcessPoolExecutor) -> tuple[Outcome, Outcome | str, dict[str, int]]:
    """Our CSV of every rule vs nsys 2022.4's on the generated exports (written here on every
    LIVE_EVERY-th, kept for the others); its kept files against those it wrote here (or why it did
    not run); how many exports nsys found something in per rule (defaults)."""
    nsys = _nsys_2022()
    kept = _gold_per_export(fixtures_dir, KEPT_2022)
    live = set(rule_exports[::LIVE_EVERY]) if isinstance(nsys, Path) else set()
    if isinstance(nsys, Path):
        with ThreadPoolExecutor(max_workers=2) as threads:
            list(threads.map(lambda db: run_nsys(nsys, db), live))
    parts = list(pool.map(_compared, [(db, kept[db.stem], db in live) for db in rule_exports], chunksize=8))
    with_rows = {rule.name: sum(bool(kept[db.stem][f"{db.stem}_{rule.name}.csv"]) for db in rule_exports)
                 for rule in rules.RULES_2022.values()}
    return _merge(p for p, _ in parts), _merge(k for _, k in parts) if live else str(nsys), with_rows


@pytest.mark.slow   # a long differential sweep
def test_rules_identical_to_nsys_2022_on_generated_exports(rule_outcome: tuple[Outcome, Outcome | str, dict[str, int]],
                                                           record_counts) -> None:
    outcome, _, with_rows = rule_outcome
    record_counts(f"nsys analyze 2022.4 (run here and kept), six rules x four option sets (defaults; rows=5, gap=1, "
                  f"threshold=80, chunks=97; a start/end window with rows=-1; an NVTX range): {outcome.compared} CSV files "
                  f"compared over {EXPORTS} generated exports, {outcome.identical} identical; exports with "
                  f"findings per rule (defaults): " + ", ".join(f"{k} {v}" for k, v in with_rows.items()))
    assert outcome.compared == EXPORTS * len(rules.RULES_2022) * len(SETS_2022)
    assert EXPORTS < 100 or min(with_rows.values()) >= 10        # every rule finds something somewhere
    assert not outcome.differing, f"{len(outcome.differing)} differ; first:\n" + "\n".join(outcome.differing[:5])


@pytest.mark.slow   # nsys 2022.4
def test_nsys_2022_writes_its_kept_rule_files(rule_outcome: tuple[Outcome, Outcome | str, dict[str, int]],
                                              record_counts) -> None:
    """The files nsys 2022.4 writes here are its kept files byte for byte: the kept files compared
    with ours above are still this nsys's output for these exports."""
    kept = rule_outcome[1]
    if isinstance(kept, str):
        pytest.skip(kept)
    record_counts(f"nsys analyze 2022.4 run here on every {LIVE_EVERY}th export: {kept.compared} files against "
                  f"its kept ones, {kept.identical} identical")
    assert kept.compared == len(range(0, EXPORTS, LIVE_EVERY)) * len(rules.RULES_2022) * len(SETS_2022)
    assert not kept.differing, (f"{len(kept.differing)} differ from the kept ones (remake them: "
                                "tests/differential/nsys_rules_2022.py); first:\n" + "\n".join(kept.differing[:5]))


def _gold_per_export(fixtures_dir: Path, name: str) -> dict[str, dict[str, str]]:
    """The files of a gold tarball (name -> text) per export: by its stem, the name up to the first
    '_' or '.'."""
    per_export: dict[str, dict[str, str]] = {}
    for file, text in gold_texts(fixtures_dir / "nsys" / name).items():
        per_export.setdefault(re.split(r"[._]", file, maxsplit=1)[0], {})[file] = text
    return per_export


def _against_2025_gold(args: tuple[Path, dict[str, str]]) -> tuple[Outcome, Outcome]:
    """One export's 2025 rules (defaults and the rows=5 set) against nsys 2025.3.1's CSVs (`gold`: its
    gold files by name); and the same files against 2022.4's layout (in a worker process)."""
    db, gold = args
    sets = option_sets(db)
    checks = [(rule_spec(rule.name, sets[name]), rule_spec(old_rule.name, sets[name]), rule, old_rule,
               _options(sets[name])) for name in ("default", "tight")
              for rule, old_rule in zip(rules.RULES.values(), rules.RULES_2022.values(), strict=True)]
    mine = iter(_ours_many(db, [job for _, _, rule, old_rule, opts in checks
                                for job in ((rule, opts), (old_rule, opts))]))
    outcome, old_layout = Outcome(), Outcome()
    for spec, old_spec, *_ in checks:
        theirs = gold[f"{db.stem}_{spec.replace(':', '_')}.csv"]
        outcome.add(db.name, spec, theirs, next(mine))
        old_layout.add(db.name, old_spec, theirs, next(mine))
    return outcome, old_layout


@pytest.mark.slow
def test_rules_identical_to_nsys_2025_gold(rule_exports: list[Path], fixtures_dir: Path,
                                           pool: ProcessPoolExecutor, record_counts) -> None:
    """The 2025 rule names against nsys 2025.3.1's own CSVs (GPU-machine gold) of the 520 exports, both
    option sets; also how many of those files 2022.4's layout (the hyphen names) would get wrong."""
    gold = _gold_per_export(fixtures_dir, GOLD_2025)
    exports = rule_exports[:GOLD_2025_EXPORTS]
    parts = list(pool.map(_against_2025_gold, [(db, gold[db.stem]) for db in exports], chunksize=8))
    outcome, old_layout = _merge(p[0] for p in parts), _merge(p[1] for p in parts)
    with_rows = {rule.name: sum(bool(gold[db.stem][f"{db.stem}_{rule.name}.csv"]) for db in exports)
                 for rule in rules.RULES.values()}
    record_counts(f"nsys analyze 2025.3.1 (gold from the GPU machine), six rules x two option sets (defaults; rows=5, gap=1, "
                  f"threshold=80, chunks=97): {outcome.compared} CSV files compared over {len(exports)} generated "
                  f"exports, {outcome.identical} identical (2022.4's layout: {old_layout.identical}); exports with "
                  f"findings per rule (defaults): " + ", ".join(f"{k} {v}" for k, v in with_rows.items()))
    assert outcome.compared == len(exports) * len(rules.RULES) * 2
    assert len(exports) < 100 or min(with_rows.values()) >= 10
    assert not outcome.differing, f"{len(outcome.differing)} differ; first:\n" + "\n".join(outcome.differing[:5])
    assert old_layout.differing        # the layouts differ on these exports: the name picks the right one


def _stdout_csv(text: str) -> str:
    """The CSV of one rule in `nsys analyze --format csv -o -`'s stdout: the lines after its
    `Processing [...]` line up to the first blank line (nothing when there are none or nsys skipped)."""
    lines = text.split("\n")
    start = next((i + 1 for i, line in enumerate(lines) if line.startswith("Processing [")), len(lines))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    found = lines[start:end]
    return "" if found and found[0].startswith("SKIPPED:") else "".join(line + "\n" for line in found)


def _against_2025_options(args: tuple[Path, dict[str, str]]) -> tuple[Outcome, dict[str, int]]:
    """One export's 2025 rules under the other option sets against nsys 2025.3.1's outputs (`gold`: its
    gold files by name); how many of those outputs have findings, per set (in a worker process)."""
    db, gold = args
    sets = option_sets(db)
    checks = [(name, rule_spec(rule.name, sets[name]), rule, _options(sets[name])) for name in SETS_2025[2:]
              for rule in rules.RULES.values()
              if name not in ("process", "thread") or rule.name in rules.TAKE_PROCESS_AND_THREAD]
    mine = _ours_many(db, [(rule, opts) for _, _, rule, opts in checks])
    outcome, found = Outcome(), dict.fromkeys(SETS_2025[2:], 0)
    for (name, spec, rule, _), ours in zip(checks, mine, strict=True):
        if name == "nvtx_second":
            theirs = _stdout_csv(gold[f"{db.stem}.{name}_{rule.name}.out"])
        else:
            theirs = gold[f"{db.stem}.{name}_{spec.replace(':', '_')}.csv"]
        found[name] += bool(theirs)
        outcome.add(db.name, spec, theirs, ours)
    return outcome, found


@pytest.mark.slow
def test_rule_options_identical_to_nsys_2025_gold(rule_exports: list[Path], fixtures_dir: Path,
                                                  pool: ProcessPoolExecutor, record_counts) -> None:
    """nsys 2025.3.1's other rule options (gold from the GPU machine, benchmarks/gpu/nsys_rules_gold_options.sh): a
    start/end window with rows=-1, nvtx=NAME, nvtx=NAME/1 for the six rules; process=PID and thread=TID
    for cuda_api_sync, the one rule that takes them (nsys refuses them for the others: see
    test_process_and_thread_only_for_cuda_api_sync)."""
    gold = _gold_per_export(fixtures_dir, GOLD_2025_OPTIONS)
    exports = rule_exports[:GOLD_2025_EXPORTS]
    parts = list(pool.map(_against_2025_options, [(db, gold[db.stem]) for db in exports], chunksize=8))
    outcome = _merge(p[0] for p in parts)
    found = {name: sum(p[1][name] for p in parts) for name in SETS_2025[2:]}
    record_counts(f"nsys analyze 2025.3.1 (gold from the GPU machine), the 2025 rules x five more option sets (start/end with rows=-1, "
                  f"nvtx=NAME, nvtx=NAME/1; process= and thread= for cuda_api_sync): {outcome.compared} CSVs compared over {len(exports)} "
                  f"exports, {outcome.identical} identical; files with findings per set: "
                  + ", ".join(f"{k} {v}" for k, v in found.items()))
    assert outcome.compared == len(exports) * (len(rules.RULES) * 3 + 2)
    assert len(exports) < 100 or min(found.values()) >= 20        # every option set finds something
    assert not outcome.differing, f"{len(outcome.differing)} differ; first:\n" + "\n".join(outcome.differing[:5])


@pytest.mark.slow
def test_rule_name_picks_the_layout(rule_exports: list[Path], tmp_path: Path) -> None:
    """`-r cuda_memset_sync` writes nsys 2025.3.1's columns (Green Context ID), `-r cuda-sync-memset`
    nsys 2022.4's, each file what run_rule gives for that layout."""
    db = next(db for db in rule_exports if _ours(db, rules.RULES["cuda_memset_sync"], rules.Options()))
    prefix = tmp_path / "out"
    res = CliRunner().invoke(main, ["nsys", "analyze", str(db), "-r", "cuda_memset_sync,cuda-sync-memset",
                                    "-o", str(prefix)])
    assert res.exit_code == 0, res.output
    new = Path(f"{prefix}_cuda_memset_sync.csv").read_text()
    old = Path(f"{prefix}_cuda-sync-memset.csv").read_text()
    assert new == _ours(db, rules.RULES["cuda_memset_sync"], rules.Options())
    assert old == _ours(db, rules.RULES_2022["cuda-sync-memset"], rules.Options())
    assert new.split("\n", 1)[0].split(",")[6:9] == ["Context ID", "Green Context ID", "Stream ID"]
    assert old.split("\n", 1)[0].split(",")[6:8] == ["Context ID", "Stream ID"]


@pytest.mark.slow
def test_2025_checks_mem_kind_enum_and_green_context(rule_exports: list[Path], tmp_path: Path) -> None:
    """nsys 2025.3.1's memcpy/memset rules need ENUM_CUDA_MEM_KIND and the greenContextId column (the
    messages are those of its rule scripts); the 2022.4 names still run on such an export."""
    db = tmp_path / "old_schema.sqlite"
    db.write_bytes(next(d for d in rule_exports if all(_ours(d, rules.RULES[name], rules.Options())
                                                       for name in ("cuda_memcpy_sync", "cuda_memset_sync"))).read_bytes())
    with sqlite3.connect(db) as con:
        con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY DROP COLUMN greenContextId")
    res = CliRunner().invoke(main, ["nsys", "analyze", str(db), "-r", "cuda_memcpy_sync,cuda-sync-memcpy"])
    assert res.exit_code == 0 and res.stderr.splitlines() == [
        f"SKIPPED: {db} could not be analyzed due to missing 'greenContextId'. Please re-export the report "
        "file with a recent version of Nsight Systems."]
    assert res.stdout.splitlines()[:2] == [f"# {db} cuda-sync-memcpy", "Duration (ns),Start (ns),Src Kind,Dst Kind,"
                                           "Bytes (MB),PID,Device ID,Context ID,Stream ID,API Name"]
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE ENUM_CUDA_MEM_KIND")
    res = CliRunner().invoke(main, ["nsys", "analyze", str(db), "-r", "cuda_memset_sync"])
    assert res.exit_code == 0 and res.stdout == ""
    assert res.stderr.splitlines() == [f"SKIPPED: {db} does not contain ENUM_CUDA_MEM_KIND table."]


@pytest.mark.slow   # nsys 2022.4
def test_real_exports_identical_to_nsys_2022(nsys: Path, fixtures_dir: Path, tmp_path: Path) -> None:
    """The committed H200 exports: nsys 2022.4 reads them, the CSVs are equal, and the sync-call
    rule lists exactly the export's cudaDeviceSynchronize/cudaStreamSynchronize calls."""
    for name in REAL:
        db = tmp_path / (name.replace("/", "__") + ".sqlite")
        db.write_bytes((fixtures_dir / "nsys" / f"{name}.sqlite").read_bytes())
        run_nsys(nsys, db)
        outcome = Outcome()
        _compare(db, outcome)
        assert not outcome.differing, "\n".join(outcome.differing[:3])
        with sqlite3.connect(db) as con:
            calls = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN StringIds AS s "
                                "ON s.id = r.nameId WHERE s.value GLOB 'cuda[DS]*Synchronize*'").fetchone()[0]
        found = _ours(db, rules.RULES_2022["cuda-sync-api"], rules.Options(rows=10**6)).splitlines()
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


@pytest.mark.slow
def test_process_and_thread_only_for_cuda_api_sync(rule_exports: list[Path], tmp_path: Path) -> None:
    """--process/--thread filter cuda_api_sync (the one rule nsys 2025.3.1 gives them to; it refuses them
    for the others: 'unrecognized arguments: process=N' in the gold's logs), never with --nvtx; each a
    one-line error with exit 2 otherwise. The rows kept are exactly the unfiltered rows of that
    process/thread (rows=-1: all of them)."""
    def rows(db: Path, *args: str) -> list[list[str]]:
        res = CliRunner().invoke(main, ["nsys", "analyze", str(db), "-r", "cuda_api_sync", "--rows", "-1", *args])
        assert res.exit_code == 0, res.output
        return [line.split(",") for line in res.stdout.splitlines()[1:]]

    # an export with more than 50 calls (the default limit) on several threads
    db = next(db for db in rule_exports if len(calls := rows(db)) > 50 and len({r[3] for r in calls}) > 1)
    everything = rows(db)
    pid, tid = everything[0][2], everything[-1][3]
    assert rows(db, "--process", pid) == [r for r in everything if r[2] == pid]
    assert rows(db, "--thread", tid) == [r for r in everything if r[3] == tid]
    assert rows(db, "--process", "999999") == []
    for args, message in ((["-r", "gpu_gaps", "--process", "1"], "only cuda_api_sync takes it"),
                          (["-r", "cuda-sync-api", "--thread", "1"], "only cuda_api_sync takes it"),
                          (["-r", "cuda_api_sync", "--thread", "1", "--nvtx", "x"], "--nvtx cannot be used with --thread")):
        res = CliRunner().invoke(main, ["nsys", "analyze", str(db), *args, "-o", str(tmp_path / "out")])
        assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
        assert not list(tmp_path.iterdir())                                   # nothing written
