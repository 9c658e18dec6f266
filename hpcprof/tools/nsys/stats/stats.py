"""The `nsys stats` reports hpcprof computes, each declared once (a ReportSpec), and the functions
that run them: same columns, rounding, row order and CSV bytes as nsys.

A ReportSpec is what NVIDIA's own report scripts declare: the report's names (the current one,
whose layout is nsys 2024-2025's, and nsys 2022.4's, whose layout is that version's), the tables
it needs and what nsys says is missing without them (its `table_checks`), whether `hpcprof
collect` keeps it per rank, and its one implementation, run by the columnar engine (reports.py,
traces.py, projection.py, um_mpi.py: numpy and Arrow, every report and format). REPORTS and
SUMMARY_REPORTS are derived from SPECS. How the numbers are computed: numerics.py; the columns
read: loaders.py, nvtx.py; the CSV: table.py.
"""

from __future__ import annotations

import importlib

from hpcprof.core.cpus import usable_cpus
from hpcprof.tools.nsys.stats.schema import (
    KERNEL,
    MEMCPY,
    MEMSET,
    NEW,
    NVTX,
    OLD,
    OSRT,
    RUNTIME,
    MissingData,
    NsysInputError,
)
from hpcprof.tools.nsys.stats.table import Table

TYPE_CHECKING = False          # typing's constant without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    import pandas as pd

    from hpcprof.tools.nsys.stats.db import Export


class Need:
    """One of `tables` must be in the export, else the report is skipped: nsys says the export
    "does not contain `what`" (hpcprof: "skipped: no `what`"). A name ending in `*` stands for the
    tables whose names start with the rest (nsys's `search_tables(r'^PREFIX.+$')`)."""

    __slots__ = ("tables", "what")

    def __init__(self, tables: tuple[str, ...], what: str) -> None:
        self.tables, self.what = tables, what

    def met(self, present: Collection[str]) -> bool:
        """Whether an export with tables `present` meets the need."""
        return any(t in present if not t.endswith("*") else
                   any(p.startswith(t[:-1]) and len(p) >= len(t) for p in present) for t in self.tables)


class ReportSpec:
    """One `nsys stats` report. `name`: its current name (nsys 2024-2025 layout; None where hpcprof
    gives only nsys 2022.4's); `old_name`: nsys 2022.4's name (that layout; None where 2022.4 has
    no such report). `columnar`: "module.function" under hpcprof.tools.nsys.stats, a function
    (export, layout) -> Table. `summary`: one of the per-rank summaries `hpcprof collect` keeps."""

    __slots__ = ("name", "old_name", "needs", "columnar", "summary")

    def __init__(self, name: str | None, old_name: str | None, needs: tuple[Need, ...], columnar: str,
                 summary: bool = False) -> None:
        self.name, self.old_name, self.needs = name, old_name, needs
        self.columnar, self.summary = columnar, summary

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.name, self.old_name) if n is not None)

    @property
    def tables(self) -> tuple[str, ...]:
        """Every table the report reads."""
        return tuple(dict.fromkeys(t for need in self.needs for t in need.tables))

    def layout(self, name: str) -> str:
        """The layout report `name` gives: the current one for the current name, else 2022.4's."""
        return NEW if name == self.name else OLD

    def check(self, present: Collection[str]) -> None:
        """Raise MissingData for the first need an export with tables `present` does not meet."""
        for need in self.needs:
            if not need.met(present):
                raise MissingData(f"no {need.what}")


def _needs(*needs: tuple[tuple[str, ...], str]) -> tuple[Need, ...]:
    return tuple(Need(tables, what) for tables, what in needs)


KERNELS = _needs(((KERNEL,), "CUDA kernel data"))
MEMORY = _needs(((MEMCPY, MEMSET), "GPU memory data"))
RANGES = _needs(((NVTX,), "NV Tools Extension (NVTX) data"))
LAUNCHES = _needs(((RUNTIME,), "CUDA API data"), ((KERNEL,), "CUDA kernel data"))
PROJECTION = _needs(((NVTX,), "NV Tools Extension (NVTX) data"), ((RUNTIME,), "CUDA API data"),
                    ((KERNEL, MEMCPY, MEMSET), "GPU operation data"))

STRING_IDS = (("StringIds",), "StringIds table")
UM_CPU_FAULTS = (("CUDA_UM_CPU_PAGE_FAULT_EVENTS",), "CUDA Unified Memory CPU page faults data")
UM_ALL = _needs(((MEMCPY,), "CUDA memory transfers data"), UM_CPU_FAULTS,
                (("CUDA_UM_GPU_PAGE_FAULT_EVENTS",), "CUDA Unified Memory GPU page faults data"))
MPI_EVENTS = (("MPI_P2P_EVENTS", "MPI_START_WAIT_EVENTS", "MPI_OTHER_EVENTS", "MPI_COLLECTIVES_EVENTS"),
              "MPI event data")

SPECS: tuple[ReportSpec, ...] = (
    ReportSpec("cuda_gpu_kern_sum", None, KERNELS, "reports.cuda_gpu_kern_sum",
               summary=True),
    ReportSpec("cuda_gpu_kern_gb_sum", "gpukernsum", KERNELS, "reports.cuda_gpu_kern_gb_sum"),
    ReportSpec("cuda_api_sum", "cudaapisum", _needs(((RUNTIME,), "CUDA trace data")), "reports.cuda_api_sum", summary=True),
    ReportSpec("cuda_gpu_mem_time_sum", "gpumemtimesum", MEMORY, "reports.cuda_gpu_mem_time_sum", summary=True),
    ReportSpec("cuda_gpu_mem_size_sum", "gpumemsizesum", MEMORY, "reports.cuda_gpu_mem_size_sum", summary=True),
    ReportSpec("cuda_gpu_sum", "gpusum", _needs(((KERNEL, MEMCPY, MEMSET), "GPU kernel/memory operations data")),
               "reports.cuda_gpu_sum"),
    ReportSpec("nvtx_sum", "nvtxsum", RANGES, "reports.nvtx_sum", summary=True),
    ReportSpec("nvtx_pushpop_sum", "nvtxppsum", RANGES, "reports.nvtx_pushpop_sum"),
    ReportSpec("nvtx_startend_sum", "nvtxsesum", RANGES, "reports.nvtx_startend_sum"),
    ReportSpec("osrt_sum", "osrtsum", _needs(((OSRT,), "OS Runtime trace data")), "reports.osrt_sum", summary=True),
    # nsys's report needs the GPU table: without TARGET_INFO_GPU it fails and writes nothing (2022.4, 2025.3.1)
    ReportSpec("cuda_gpu_trace", "gputrace",
               _needs((("TARGET_INFO_GPU",), "GPU description (TARGET_INFO_GPU) for the GPU trace"),
                      ((KERNEL, MEMCPY, MEMSET), "GPU trace data")), "reports.cuda_gpu_trace"),
    ReportSpec("cuda_kern_exec_sum", "kernexecsum", LAUNCHES, "reports.cuda_kern_exec_sum"),
    ReportSpec("cuda_api_trace", "cudaapitrace", _needs(((RUNTIME,), "CUDA trace data"), (("ThreadNames",), "thread names "
                                                                              "(ThreadNames)")),
               "traces.cuda_api_trace"),
    ReportSpec("cuda_api_gpu_sum", "apigpusum", _needs(((RUNTIME, KERNEL, MEMCPY, MEMSET),
                                          "CUDA API, GPU kernel, nor memory operations data")),
               "reports.cuda_api_gpu_sum"),
    ReportSpec("cuda_kern_exec_trace", "kernexectrace", LAUNCHES, "traces.cuda_kern_exec_trace"),
    ReportSpec("nvtx_gpu_proj_trace", "nvtxgpuproj", PROJECTION, "projection.nvtx_gpu_proj_trace"),
    ReportSpec("nvtx_gpu_proj_sum", None, PROJECTION, "projection.nvtx_gpu_proj_sum"),
    ReportSpec("nvtx_kern_sum", "nvtxkernsum", _needs(((NVTX,), "NV Tools Extension (NVTX) data"),
                                                      ((KERNEL,), "CUDA kernel data"), ((RUNTIME,), "CUDA API data")),
               "projection.nvtx_kern_sum"),
    # unified memory, OpenMP, MPI (um_mpi.py); needs in the order of nsys's table_checks
    ReportSpec("um_cpu_page_faults_sum", "umcpupagefaults", _needs(STRING_IDS, UM_CPU_FAULTS),
               "um_mpi.um_cpu_page_faults_sum"),
    ReportSpec("um_sum", "unifiedmemory", UM_ALL, "um_mpi.um_sum"),
    ReportSpec("um_total_sum", "unifiedmemorytotals", UM_ALL, "um_mpi.um_total_sum"),
    ReportSpec("openmp_sum", "openmpevtsum", _needs(STRING_IDS, (("OPENMP_EVENT_KIND_*",), "OpenMP event data")),
               "um_mpi.openmp_sum"),
    ReportSpec("mpi_event_sum", None, _needs(STRING_IDS, MPI_EVENTS), "um_mpi.mpi_event_sum"),
    ReportSpec("mpi_event_trace", None, _needs(STRING_IDS, (("MPI_RANKS",), "MPI rank data"), MPI_EVENTS),
               "um_mpi.mpi_event_trace"),
)

#: `nsys stats` without -r: nsys 2022.4's default report set, in its order (`nsys stats --help`)
DEFAULT_REPORTS = ("nvtxsum", "osrtsum", "cudaapisum", "gpukernsum", "gpumemtimesum", "gpumemsizesum", "openmpevtsum",
                   "khrdebugsum", "khrdebuggpusum", "vulkanmarkerssum", "vulkangpumarkersum", "dx11pixsum",
                   "dx12gpumarkersum", "dx12pixsum", "wddmqueuesdetails", "unifiedmemory", "unifiedmemorytotals",
                   "umcpupagefaults", "openaccsum")
#: the reports of that set hpcprof does not compute (graphics, Windows, OpenACC: not in REPORTS, so `-r`
#: refuses them) with nsys's table_checks: run by default, each is skipped as nsys skips it where the
#: export lacks its data (every CUDA export hpcprof profiles), and said not computed where it has them
NOT_COMPUTED: dict[str, Need] = {
    "khrdebugsum": Need(("KHR_DEBUG_EVENTS",), "KHR Extension (KHR_DEBUG) data"),
    "khrdebuggpusum": Need(("KHR_DEBUG_EVENTS",), "GPU KHR Extension (KHR_DEBUG) data"),
    "vulkanmarkerssum": Need(("VULKAN_DEBUG_API",), "Vulkan Debug Extension (Vulkan Debug Util) data"),
    "vulkangpumarkersum": Need(("VULKAN_WORKLOAD",), "GPU Vulkan Debug Extension (GPU Vulkan Debug markers) data"),
    "dx11pixsum": Need(("D3D11_PIX_DEBUG_API",), "DX11 CPU debug markers"),
    "dx12gpumarkersum": Need(("DX12_WORKLOAD",), "DX12 GPU debug markers"),
    "dx12pixsum": Need(("D3D12_PIX_DEBUG_API",), "DX12 CPU debug markers"),
    "wddmqueuesdetails": Need(("TARGET_INFO_WDDM_CONTEXTS",), "WDDM context data"),
    "openaccsum": Need(("CUPTI_ACTIVITY_KIND_OPENACC_*",), "OpenACC event data"),
}

#: every report name hpcprof knows (current names first) -> its spec
REPORTS: dict[str, ReportSpec] = {
    **{s.name: s for s in SPECS if s.name is not None}, **{s.old_name: s for s in SPECS if s.old_name is not None}}
#: the per-rank summary reports `hpcprof collect` keeps
SUMMARY_REPORTS = tuple(s.name for s in SPECS if s.summary and s.name is not None)


def not_computed(name: str, present: Collection[str]) -> MissingData | NsysInputError:
    """What report `name` of NOT_COMPUTED gives on an export with tables `present`: MissingData
    (skipped, as nsys skips it) where it lacks the report's data, else the error that hpcprof does
    not compute it."""
    need = NOT_COMPUTED[name]
    if not need.met(present):
        return MissingData(f"no {need.what}")
    return NsysInputError(f"{name}: the export has {need.what}, which hpcprof does not report (a graphics, "
                          f"Windows or OpenACC report of nsys's default set); run `nsys stats -r {name}`")


def spec_of(name: str) -> ReportSpec:
    """The spec of report `name`; NsysInputError naming the known reports otherwise."""
    if name not in REPORTS:
        raise NsysInputError(f"unknown report {name!r}; known: {', '.join(REPORTS)}")
    return REPORTS[name]


def implementation(path: str) -> Callable[..., Table]:
    """The function at "module.function" under hpcprof.tools.nsys.analysis (its module imported now)."""
    module, _, function = path.rpartition(".")
    return getattr(importlib.import_module(f"hpcprof.tools.nsys.stats.{module}"), function)


#: reports of up to this many rows are kept in the export's cache (the summaries, not the traces)
CACHED_ROWS = 10_000


def run_table(export: Export, name: str) -> Table:
    """Report `name` (current or nsys 2022.4 spelling) on `export`, by the columnar engine; a
    summary report once computed is kept in the export's cache (where it has one, cache.py)."""
    if name in NOT_COMPUTED:
        raise not_computed(name, export.table_names)
    spec = spec_of(name)
    spec.check(export.table_names)

    def compute() -> Table:
        return implementation(spec.columnar)(export, spec.layout(name))

    return export.cached_result(f"stats {name}", compute,
                                lambda table: table.to_json() if len(table) <= CACHED_ROWS else None, Table.from_json)


def run_report(export: Export, name: str) -> pd.DataFrame:
    """Report `name` on `export` as a DataFrame (formats in `attrs`)."""
    return run_table(export, name).to_frame()


def run_reports(export: Export, names: list[str], workers: int | None = None,
                frames: bool = True) -> list[pd.DataFrame | Table | Exception]:
    """Reports `names` on `export` by the columnar engine, computed concurrently (the column
    reads and sorts release the GIL); each entry is the DataFrame (a Table with `frames=False`)
    or the MissingData/NsysInputError it raised."""
    from concurrent.futures import ThreadPoolExecutor

    run = run_report if frames else run_table
    workers = workers or max(1, min(len(names), usable_cpus()))
    tables = {n: REPORTS[n].tables if n in REPORTS else () for n in names}
    sizes = {t: export.size(t) for t in {t for ts in tables.values() for t in ts}}
    weight = {n: sum(sizes[t] for t in tables[n]) for n in names}
    with ThreadPoolExecutor(workers) as pool:                  # the largest first: the pool stays busy
        started = {n: pool.submit(run, export, n) for n in sorted(set(names), key=lambda n: -weight[n])}
        futures = [started[n] for n in names]
    out: list[pd.DataFrame | Table | Exception] = []
    for future in futures:
        exc = future.exception()
        if exc is not None and not isinstance(exc, (MissingData, NsysInputError)):
            raise exc
        out.append(exc if exc is not None else future.result())
    return out
