"""`hpcprof trace ...` commands: HTA's analyses of torch.profiler traces, one file per rank."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from hpcprof.cli.options import one_file_per_rank
from hpcprof.core.errors import FiniteRange, UserError, printable
from hpcprof.core.output import FORMATS, emit
from hpcprof.tools.torch.analysis import analyses
from hpcprof.tools.torch.analysis.load import RankTrace, find_trace_files, load_traces
from hpcprof.tools.torch.analysis.table import Table

if TYPE_CHECKING:
    import pandas as pd

#: Most numbers a --ranks/--streams list may name (ranges included).
MAX_LIST = 1 << 20


def parse_int_list(text: str, option: str) -> set[int]:
    """'0,2,4-7' -> {0, 2, 4, 5, 6, 7}; a UserError naming `option` when malformed, descending
    or naming more than MAX_LIST numbers (counted before any range is expanded)."""
    spans = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, _, hi = part.partition("-")
            spans.append((int(lo), int(hi or lo)))
    except ValueError:
        raise UserError(f"{option} {text!r}: expected a list such as 0,2,4-7") from None
    if any(lo < 0 or hi < lo for lo, hi in spans):
        raise UserError(f"{option} {text!r}: ranges go from low to high, from 0 (e.g. 4-7)")
    if sum(hi - lo + 1 for lo, hi in spans) > MAX_LIST:
        raise UserError(f"{option} {text!r}: names more than {MAX_LIST} numbers")
    return {n for lo, hi in spans for n in range(lo, hi + 1)}


#: --workers of every `trace` command (load.map_traces)
workers_option = click.option(
    "--workers", type=click.IntRange(1, 4096), default=None,
    help="Processes loading the traces: one per file, those beyond decode parts of a file (up to 3 each) "
         "[default: the CPUs this process may use (its affinity: a job's cpuset) when the traces "
         "exceed 4 MB in all, else 1].")


def load_or_fail(paths: tuple[Path, ...], ranks: str | None, include_last_step: bool, clamp_sub_us: bool = False,
                 ignore_unmatched_launches: bool = False,
                 workers: int | None = None) -> tuple[list[RankTrace], list[str]]:
    """Load the traces (in `workers` processes, load.map_traces); one 'hpcprof:' line on stderr per
    input not analysed (and per rank asked for but absent). UserError when nothing could be loaded."""
    wanted = None if ranks is None else parse_int_list(ranks, "--ranks")
    one_file_per_rank(find_trace_files(paths))
    traces, errors = load_traces(paths, wanted, include_last_step, workers=workers, clamp_sub_us=clamp_sub_us,
                                 ignore_unmatched_launches=ignore_unmatched_launches)
    for line in errors:
        click.echo(f"hpcprof: {printable(line)}", err=True)
    if wanted is not None and traces and not wanted <= {t.rank for t in traces}:
        missing = sorted(wanted - {t.rank for t in traces})
        errors.append(f"ranks not found: {missing}")
        click.echo(f"hpcprof: ranks not found: {missing}", err=True)
    if not traces:
        raise UserError("no trace could be analysed")
    return traces, errors


def fail_if(errors: list[str]) -> None:
    if errors:
        raise UserError(f"{len(errors)} input(s) not analysed, see the 'hpcprof:' lines")


def show(result: Table | pd.DataFrame, fmt: str, out: TextIO | None = None, title: str | None = None) -> None:
    """output.emit of an analysis; a Table's CSV is written from its columns (Table.write_csv: the
    same bytes, without pandas)."""
    out = out or sys.stdout
    if isinstance(result, Table) and fmt == "csv":
        result.write_csv(out, terminal=out.isatty())
    else:
        emit(result.frame() if isinstance(result, Table) else result, fmt, out, title)


def trace_command(name: str, help_: str) -> Callable[[Callable[..., Table | pd.DataFrame]], click.Command]:
    """A `trace` subcommand: loads PATH... and emits what the wrapped function returns.

    Unreadable files and files without GPU events get one line each on stderr; the others are
    still analysed, and the command then exits with status 2.
    """

    def decorate(func: Callable[..., Table | pd.DataFrame]) -> click.Command:
        @trace.command(name, help=help_)
        @click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
        @click.option("--ranks", help="Ranks to analyse, e.g. 0,2,4-7 (default: all).")
        @click.option("--include-last-step", is_flag=True,
                      help="Keep the last ProfilerStep (HTA drops it as possibly truncated).")
        @click.option("--clamp-sub-us", is_flag=True,
                      help="Give sub-µs events of ns traces duration 0 (HTA lets their end "
                           "fall before their start).")
        @click.option("--ignore-unmatched-launches", is_flag=True,
                      help="A GPU event whose launch is not in the trace is never host_wait (HTA "
                           "takes the file's first event as its launch).")
        @click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                      show_default=True)
        @workers_option
        @functools.wraps(func)
        def command(paths: tuple[Path, ...], ranks: str | None, include_last_step: bool,
                    clamp_sub_us: bool, ignore_unmatched_launches: bool, fmt: str, workers: int | None,
                    **options: Any) -> None:
            traces, errors = load_or_fail(paths, ranks, include_last_step, clamp_sub_us, ignore_unmatched_launches,
                                          workers)
            show(func(traces, **options), fmt, title=name)
            fail_if(errors)

        return command

    return decorate


@click.group("trace")
def trace() -> None:
    """HTA's analyses of torch.profiler (Kineto) traces, one file per rank.

    PATH is a trace file (.json or .json.gz) or a folder of them. The rank of a file is
    distributedInfo.rank, else the number in 'rank<N>' of its name. All ranks are analysed
    unless --ranks is given.
    """


@trace_command("temporal", "Idle, compute and non-compute GPU time per rank.")
def temporal(traces: list[RankTrace]) -> Table:
    return analyses.temporal_breakdown(traces)


@trace_command("overlap", "Percentage of communication time overlapped by computation, per rank.")
def overlap(traces: list[RankTrace]) -> Table:
    return analyses.comm_comp_overlap(traces)


@trace_command("idle", "GPU idle time per rank and stream: host wait, kernel wait, other.")
@click.option("--streams", help="Streams to analyse, e.g. 7,20 (default: all).")
@click.option("--consecutive-kernel-delay", type=FiniteRange(min=0, max=1e12), default=30, show_default=True,
              help="Gaps shorter than this (µs) count as kernel wait.")
@click.option("--stats", is_flag=True, help="Show statistics of the idle intervals instead.")
def idle(traces: list[RankTrace], streams: str | None, consecutive_kernel_delay: float,
         stats: bool) -> Table | pd.DataFrame:
    analysis = analyses.idle_interval_stats if stats else analyses.idle_time_breakdown
    chosen = sorted(parse_int_list(streams, "--streams")) if streams else None
    return analysis(traces, chosen, consecutive_kernel_delay)


@trace_command("launch", "CPU launch time, GPU time and launch delay per correlation id.")
@click.option("--runtime-cutoff", type=FiniteRange(min=0, max=1e12), default=50, show_default=True,
              help="CPU launch calls longer than this (µs) are runtime outliers.")
@click.option("--launch-delay-cutoff", type=FiniteRange(min=0, max=1e12), default=100, show_default=True,
              help="Launch delays longer than this (µs) are outliers.")
@click.option("--no-memory-events", is_flag=True,
              help="Leave out cudaMemcpyAsync / cudaMemsetAsync.")
def launch(traces: list[RankTrace], runtime_cutoff: float, launch_delay_cutoff: float,
           no_memory_events: bool) -> Table:
    return analyses.kernel_launch_stats(traces, runtime_cutoff, launch_delay_cutoff,
                                        not no_memory_events)


@trace_command("kernels", "Time per GPU kernel and per kernel type (COMM / COMP / MEM).")
@click.option("--types", "by_type", is_flag=True,
              help="Show time per kernel type and type overlap instead of per kernel.")
@click.option("--per-rank", is_flag=True, help="With --types: one breakdown per rank.")
@click.option("--num-kernels", type=click.IntRange(min=1), default=10, show_default=True,
              help="Kernels shown per type and rank; the rest are 'others'.")
@click.option("--duration-ratio", type=FiniteRange(min=0, max=1, min_open=True), default=0.8, show_default=True,
              help="Kernels past this quantile of cumulative time are 'others'.")
@click.option("--no-memory", is_flag=True, help="Leave out MEMORY kernels (memcpy/memset).")
@click.option("--instance-stats", is_flag=True,
              help="Once kernels are collapsed into 'others', keep per-instance max/min/mean/stddev "
                   "(HTA recomputes them from per-kernel totals).")
def kernels(traces: list[RankTrace], by_type: bool, per_rank: bool, num_kernels: int,
            duration_ratio: float, no_memory: bool, instance_stats: bool) -> Table:
    if by_type:
        return analyses.kernel_type_breakdown(traces, not no_memory, per_rank)
    return analyses.kernel_breakdown(traces, num_kernels, duration_ratio, not no_memory, instance_stats)


@trace.command("all")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--ranks", help="Ranks to analyse, e.g. 0,2,4-7 (default: all).")
@click.option("--include-last-step", is_flag=True,
              help="Keep the last ProfilerStep (HTA drops it as possibly truncated).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("-o", "--output-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write one file per analysis here (<name>.csv or .json) instead of printing.")
@workers_option
def all_(paths: tuple[Path, ...], ranks: str | None, include_last_step: bool, fmt: str,
         output_dir: Path | None, workers: int | None) -> None:
    """Every analysis (temporal, overlap, idle, launch, kernels, kernel_types) with its defaults,
    loading the traces once; one output per analysis."""
    traces, errors = load_or_fail(paths, ranks, include_last_step, workers=workers)
    results = analyses.all_analyses(traces)
    if output_dir is None:
        for name, table in results.items():
            if fmt != "table":
                click.echo(f"# {name}")
            show(table, fmt, title=name)
    else:
        if fmt == "table":
            raise UserError("-o DIR writes files: add --format csv or --format json")
        from hpcprof.core.atomic import write_text_stream

        inputs = find_trace_files(paths)
        try:
            for name, table in results.items():
                written = write_text_stream(output_dir / f"{name}.{fmt}",
                                            functools.partial(show, table, fmt), inputs=inputs)
                click.echo(f"wrote {printable(str(written))}", err=True)
        except OSError as exc:
            raise UserError(f"-o {output_dir}: cannot write ({exc.strerror}); choose a writable directory") from None
    fail_if(errors)


@trace.command("critical-path")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--segments", is_flag=True, help="Show the chain of each iteration (compute, wait and collective "
              "segments per rank) instead of one row per iteration.")
@click.option("--waits", is_flag=True, help="Show, per collective type, each rank's kernel time split into the "
              "transfer (after the last rank arrived) and the wait for the last rank, which rank came last, and the "
              "transfer no other GPU work of the rank overlapped (exposed_ns).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (--format csv or json) instead of stdout.")
@workers_option
def critical_path_cmd(paths: tuple[Path, ...], segments: bool, waits: bool, fmt: str, output: Path | None,
                      workers: int | None) -> None:
    """Per ProfilerStep, across ranks: the collective the others waited longest in, the rank they
    waited for, the annotation (or kernel) that held it, the wait, and the step's length on the
    critical path. Collectives are matched by process group and sequence number (launch order where
    the trace has none)."""
    from hpcprof.analysis.clocks import aligned
    from hpcprof.analysis.collective_wait import transfer_wait
    from hpcprof.tools.torch.analysis import critical_path as cp

    if output is not None and fmt == "table":
        raise UserError("-o FILE writes --format csv or --format json; add one of them")
    if segments and waits:
        raise UserError("--segments and --waits show different tables: give one of them")
    files = find_trace_files(paths)
    one_file_per_rank(files)
    events, errors = cp.load_events(files, workers)
    for line in errors:
        click.echo(f"hpcprof: {printable(line)}", err=True)
    if events is None:
        raise UserError("no trace could be analysed")
    events, said = aligned(events)
    if said is not None:
        click.echo(f"hpcprof: {said}", err=True)
    table = transfer_wait(events) if waits else cp.critical_path(events)[1 if segments else 0]
    _emit_or_write(table, fmt, output, files, "transfer-wait" if waits else "critical-path")
    fail_if(errors)


def _emit_or_write(table: pd.DataFrame, fmt: str, output: Path | None, files: list[Path], title: str) -> None:
    """The table on stdout, or written to `output` (-o) in `fmt`."""
    if output is None:
        emit(table, fmt, title=title)
        return
    from hpcprof.core.output import write

    try:
        click.echo(f"wrote {printable(str(write(table, output, fmt, files)))}", err=True)
    except OSError as exc:
        raise UserError(f"-o {output}: cannot write ({exc.strerror}); choose a writable path") from None


@trace.command("nccl")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (--format csv or json) instead of stdout.")
@workers_option
def nccl_cmd(paths: tuple[Path, ...], fmt: str, output: Path | None, workers: int | None) -> None:
    """Bus bandwidth of the NCCL collectives per rank, process group, collective and message-size
    bucket, in each trace's measured window (its ProfilerSteps), then across ranks with the slowest
    and fastest rank: median bytes, median kernel time, algbw = bytes / time, busbw = algbw ·
    nccl-tests' factor (collect's torch_busbw; sizes from record_param_comms)."""
    from hpcprof.tools.torch.analysis.collectives import busbw_of_files

    if output is not None and fmt == "table":
        raise UserError("-o FILE writes --format csv or --format json; add one of them")
    files = find_trace_files(paths)
    one_file_per_rank(files)
    table, errors = busbw_of_files(files, workers)
    for line in errors:
        click.echo(f"hpcprof: {printable(line)}", err=True)
    if table is None:
        raise UserError("no trace could be analysed")
    _emit_or_write(table, fmt, output, files, "nccl")
    fail_if(errors)


@trace.command("causes")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--samples", type=click.Path(path_type=Path, file_okay=False),
              help="Folder of the stack sampler's rank<N>.jsonl (default: samples/ of the run, found above each trace).")
@click.option("--all-causes", is_flag=True, help="List every cause, also those under 5 % of the step.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def causes_cmd(paths: tuple[Path, ...], samples: Path | None, all_causes: bool, fmt: str) -> None:
    """Why the device waits: each step's idle time per rank split into its host-side causes (input,
    sync, launch, optimizer, ...) in ms per step, with the line of the program and the fix."""
    from hpcprof.analysis import idle as I
    from hpcprof.tools.torch.analysis.idle import add_queue_length, timeline
    from hpcprof.tools.torch.analysis.load import load_trace
    from hpcprof.tools.torch.analysis.stream import TraceError

    timelines, errors = [], []
    for path in find_trace_files(paths):
        try:
            timelines.append(found := timeline(path, samples_dir=samples))
        except (TraceError, OSError, ValueError) as exc:
            errors.append(f"{path}: {exc}")
            click.echo(f"hpcprof: {printable(str(exc))}", err=True)
            continue
        try:
            add_queue_length(found, load_trace(path, found.rank))
        except TraceError:          # a CPU run's trace: no device events, no device queue
            pass
    if not timelines:
        raise UserError("no trace could be analysed")
    frame = I.attribute(timelines)
    show(frame if all_causes else I.named(frame), fmt, title="idle causes")
    fail_if(errors)
