"""The Python API (hpcprof.api): the example notebook (examples/hta_notebook.md, the GiGL HTA
notebook's cells) runs as written on the shipped traces, its tables equal HTA 0.5.0's own (the
notebook asserts it when HTA is installed; here it is), `plot=True` gives figures of those
tables, and an nsys report equals nsys's own output."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest

from hpcprof import api
from hpcprof.errors import UserError

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "examples" / "hta_notebook.md"
DDP = REPO / "tests" / "fixtures" / "hta" / "h200_ddp_gpt2"


def python_cells(path: Path) -> list[str]:
    """The ```python cells of a jupytext markdown notebook, in order."""
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), re.DOTALL | re.MULTILINE)


def test_notebook_runs_as_written(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    cells = python_cells(NOTEBOOK)
    assert len(cells) >= 10
    namespace: dict[str, object] = {}
    for cell in cells:
        exec(compile(cell, str(NOTEBOOK), "exec"), namespace)  # noqa: S102 - the example is the test
    if importlib.util.find_spec("hta") is not None:   # the notebook's last cell compares with HTA itself
        assert "hpcprof and HTA agree" in capsys.readouterr().out
    temporal = namespace["temporal"]
    assert isinstance(temporal, pd.DataFrame) and list(temporal["rank"]) == [0, 1]
    idle, stats = namespace["idle"], namespace["idle_stats"]
    assert set(idle["idle_category"]) <= {"host_wait", "kernel_wait", "other"} and len(stats)
    kernel_type_df = namespace["kernel_type_df"]
    assert kernel_type_df["percentage"].sum() == pytest.approx(100, abs=0.3)


def test_figures_draw_the_tables() -> None:
    traces = api.load_traces(DDP)
    temporal = traces.temporal_breakdown()
    fig = traces.temporal_breakdown(plot=True)
    assert isinstance(fig, go.Figure)
    assert [bar.name for bar in fig.data] == ["idle", "compute", "non-compute"]
    assert list(fig.data[1].y) == list(temporal["compute_time_pctg"])
    overlap = traces.comm_comp_overlap()
    assert list(traces.comm_comp_overlap(plot=True).data[0].y) == list(overlap["comp_comm_overlap_pctg"])
    by_type, _ = traces.gpu_kernel_breakdown()
    pie = traces.gpu_kernel_breakdown(plot=True).data[0]
    assert list(pie.values) == list(by_type["sum"]) and list(pie.labels) == list(by_type["kernel_type"])


def test_ranks_select_and_bad_input_is_one_line(tmp_path: Path) -> None:
    traces = api.load_traces(DDP, ranks=[1])
    assert traces.ranks == [1] and list(traces.temporal_breakdown()["rank"]) == [1]
    with pytest.raises(UserError, match=r"ranks \[3\]: not among the loaded ranks \[1\]"):
        traces.temporal_breakdown(ranks=[3])
    with pytest.raises(UserError, match="no usable trace under"):
        api.load_traces(tmp_path)
    with pytest.raises(UserError, match="nsys report 'cuda_kern': unknown; known: .*cuda_gpu_kern_sum"):
        api.nsys_report(tmp_path / "x.sqlite", "cuda_kern")


def test_nsys_report_equals_nsys(fixtures_dir: Path) -> None:
    """cuda_gpu_kern_sum of an H200 export against the CSV nsys stats wrote for it."""
    folder = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    ours = api.nsys_report(folder / "rank0.sqlite", "cuda_gpu_kern_sum")
    theirs = pd.read_csv(folder / "rank0_cuda_gpu_kern_sum.csv")
    assert list(ours["Name"]) == list(theirs["Name"])
    assert list(ours["Total Time (ns)"]) == list(theirs["Total Time (ns)"])
    assert list(ours["Instances"]) == list(theirs["Instances"])
