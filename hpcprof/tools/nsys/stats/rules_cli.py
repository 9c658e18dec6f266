"""`hpcprof nsys analyze`: nsys's expert-system rules (rules.py) on exports, as `nsys analyze --format csv`.

The rule names choose the layout as each nsys spells them: the 2025 names (gpu_gaps, ...) give
nsys 2025.3.1's CSV, nsys 2022.4's hyphen names (gpu-starv, ...) give 2022.4's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from hpcprof.cli.options import files_argument
from hpcprof.core.errors import UserError
from hpcprof.tools.nsys.stats.rules import (
    RULES,
    RULES_2022,
    TAKE_PROCESS_AND_THREAD,
    Options,
    Rule,
    Skipped,
    open_export,
    run_rule,
    write_csv,
)
from hpcprof.tools.nsys.stats.schema import NsysInputError


def rule_named(name: str) -> Rule:
    """The rule of an nsys 2025 name (2025.3.1's layout) or an nsys 2022.4 name (2022.4's)."""
    rule = RULES.get(name) or RULES_2022.get(name)
    if rule is None:
        raise click.BadParameter(f"unknown rule {name!r}; known: {', '.join(RULES)} "
                                 f"(or nsys 2022.4's {', '.join(RULES_2022)})", param_hint="'--rule'")
    return rule



@click.command("analyze")
@files_argument
@click.option("--rule", "-r", "rule_names", default=",".join(RULES), show_default=True,
              help="Rule name(s), comma separated: nsys 2025 names give nsys 2025.3.1's CSV, "
                   "nsys 2022.4 names (gpu-starv, ...) 2022.4's.")
@click.option("--rows", type=click.IntRange(min=-1), default=50, show_default=True,
              help="At most this many rows per rule (-1: all).")
@click.option("--gap", "gap_ms", type=click.IntRange(min=0), default=500, show_default=True,
              help="gpu_gaps: report idle gaps longer than this many ms.")
@click.option("--threshold", type=click.IntRange(0, 100), default=50, show_default=True,
              help="gpu_time_util: report chunks less busy than this %.")
@click.option("--chunks", type=click.IntRange(1, 1000), default=30, show_default=True,
              help="gpu_time_util: chunks per process and device.")
@click.option("--start", "window_start", type=click.IntRange(min=0), default=None,
              help="Only operations/calls overlapping [START, END) ns (nsys's start=).")
@click.option("--end", "window_end", type=click.IntRange(min=0), default=None, help="End of that window (ns).")
@click.option("--nvtx", default=None, metavar="RANGE[@DOMAIN][/N]",
              help="Only what overlaps the first NVTX range of this name, or its N-th (from 0; 2025 names), and its "
                   "thread or process.")
@click.option("--process", "process_id", type=click.IntRange(min=0), default=None,
              help="cuda_api_sync: only this process id (not with --nvtx).")
@click.option("--thread", "thread_id", type=click.IntRange(min=0), default=None,
              help="cuda_api_sync: only this thread id (not with --nvtx).")
@click.option("--output", "-o", "prefix", default=None,
              help="Write PREFIX_<rule>.csv (PREFIX_<file>_<rule>.csv for several files) instead of stdout.")
def analyze_cmd(files: tuple[Path, ...], rule_names: str, rows: int, gap_ms: int, threshold: int, chunks: int,
                window_start: int | None, window_end: int | None, nvtx: str | None, process_id: int | None,
                thread_id: int | None, prefix: str | None) -> None:
    """`nsys analyze` rules (CSV): the same findings, rows and bytes as nsys's `--format csv` (2025.3.1
    for the 2025 rule names, 2022.4 for its hyphen names). A rule whose tables the export lacks is
    skipped with nsys's message (exit 0)."""
    rules = [rule_named(n.strip()) for n in rule_names.split(",") if n.strip()]
    if window_start is not None and window_end is not None and window_start > window_end:
        raise UserError(f"--start {window_start} is after --end {window_end}: give a start before the end")
    ids = [name for name, value in (("--process", process_id), ("--thread", thread_id)) if value is not None]
    if ids and nvtx is not None:
        raise UserError(f"--nvtx cannot be used with {' or '.join(ids)} (as in nsys): give one of them")
    refusing = [rule.name for rule in rules if rule.name not in TAKE_PROCESS_AND_THREAD]
    if ids and refusing:
        raise UserError(f"{' and '.join(ids)}: only {', '.join(TAKE_PROCESS_AND_THREAD)} takes it (nsys "
                        f"refuses it for {', '.join(refusing)}): give -r {TAKE_PROCESS_AND_THREAD[0]}")
    opts = Options(rows, gap_ms, threshold, chunks, window_start, window_end, nvtx, process_id, thread_id)
    blocks, failures = len(files) * len(rules), 0
    for path in files:
        try:
            conn = open_export(path)
        except NsysInputError as exc:
            click.echo(f"hpcprof nsys: {exc}", err=True)
            failures += 1
            continue
        with conn:
            try:
                results = [(rule, run_rule(conn, rule, opts, str(path))) for rule in rules]
            except NsysInputError as exc:
                click.echo(f"hpcprof nsys: {exc}", err=True)
                failures += 1
                continue
        conn.close()
        for rule, found in results:
            if isinstance(found, Skipped):
                click.echo(f"SKIPPED: {found.message}", err=True)
                continue
            if not found:
                click.echo(f"{path}: {rule.name} ({rule.title}): no findings", err=True)
            if prefix is not None:
                _write_file(rule, found, Path(f"{prefix}_{path.stem}" if len(files) > 1 else prefix), path)
                continue
            if blocks > 1 and found:
                click.echo(f"# {path} {rule.name}")
            write_csv(rule, found, sys.stdout)
            if blocks > 1 and found:
                click.echo("")
    if failures:
        raise UserError(f"{failures} of {len(files)} input file(s) could not be analysed (see messages above)")


def _write_file(rule: Rule, rows: list[tuple[Any, ...]], stem: Path, source: Path) -> None:
    from hpcprof.core.atomic import write_text_stream

    target = write_text_stream(Path(f"{stem}_{rule.name}.csv"), lambda fh: write_csv(rule, rows, fh), inputs=[source])
    click.echo(f"wrote {target}", err=True)
