"""Each built-in profiler is one package, hpcprof/tools/<tool>/, reached from the other rooms through
its `Profiler` (hpcprof.profilers): its capture hook (render), its options model (ProfileConfig's
fields), its `hpcprof diff` loader and its part of the Python API. Outside its package only the
registry and the CLI's command table name it."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from test_extending import naming

from hpcprof import api, profilers
from hpcprof.analysis.diff.profiles import DiffInputError, load_profile
from hpcprof.config.profile import ProfileConfig, ToolName, WindowConfig
from hpcprof.core.models import convert
from hpcprof.render.steps import capture_options, tool_options
from hpcprof.tools.ncu.profiler import NcuOptions
from hpcprof.tools.nsys.analysis import api as nsys_api
from hpcprof.tools.nsys.profiler import NsysOptions
from hpcprof.tools.torch.analysis import api as torch_api
from hpcprof.tools.torch.profiler import TorchOptions


@pytest.mark.parametrize("tool", ["nsys", "torch", "ncu"])
def test_a_tool_is_named_outside_its_package_by_the_registry_and_the_cli_only(tool: str) -> None:
    assert sorted(naming([f"hpcprof.tools.{tool}"])) == ["cli/__init__.py", "profilers/__init__.py"]


def test_profile_config_has_the_registry_options_models_as_fields() -> None:
    fields = {f.name: f.type for f in msgspec.structs.fields(ProfileConfig)}
    assert list(fields) == ["tool", "ranks", "window", "memory", "nsys", "ncu", "torch", "reference"]
    assert {name: fields[name] for name in ("nsys", "ncu", "torch")} == {
        name: tool.options for name, tool in profilers.BUILTIN.items() if tool.options}
    decoded = convert(ProfileConfig, {"tool": "ncu", "ncu": {"profile_from_start": False}})
    assert decoded.options == NcuOptions(profile_from_start=False) and decoded.nsys == NsysOptions()
    with pytest.raises(msgspec.ValidationError, match=r"unknown field `rocprof`"):
        convert(ProfileConfig, {"rocprof": {}})


def profile(tool: str, workload_window: WindowConfig | None = None, **options: object) -> ProfileConfig:
    blocks = {"nsys": NsysOptions, "ncu": NcuOptions, "torch": TorchOptions}
    given = {tool: blocks[tool](**options)} if tool in blocks else {}
    return ProfileConfig(tool=ToolName(tool), window=workload_window or WindowConfig(), **given)


@pytest.mark.parametrize("tool, options, opens", [
    ("nsys", {"capture_range": "cudaProfilerApi"}, True),
    ("nsys", {"capture_range": "none"}, False),
    ("nsys", {"capture_range": "nvtx", "nvtx_capture": "step"}, False),
    ("ncu", {"profile_from_start": False}, True),
    ("ncu", {}, False),
    ("torch", {}, False),
    ("none", {}, False),
])
def test_the_capture_hook_says_whether_the_step_hook_opens_the_range(tool: str, options: dict, opens: bool) -> None:
    assert (capture_options(profile(tool, **options)) is not None) == opens


def test_nsys_starts_with_capture_range_end_stop_where_the_hook_opens_its_range() -> None:
    opened = profile("nsys", capture_range="cudaProfilerApi")
    assert tool_options(opened, "command").capture_range_end == "stop"
    assert tool_options(opened, "seqpar").capture_range_end is None          # seqpar opens its own range
    by_program = profile("nsys", WindowConfig(opened_by_program=True), capture_range="cudaProfilerApi")
    assert tool_options(by_program, "command").capture_range_end is None
    given = profile("nsys", capture_range="cudaProfilerApi", capture_range_end="repeat:2")
    assert tool_options(given, "command").capture_range_end == "repeat:2"
    ncu = profile("ncu", profile_from_start=False)
    assert tool_options(ncu, "command") is ncu.options


@pytest.mark.parametrize("name, body, said", [
    ("rank0.sqlite", b"not sqlite at all", "not an SQLite database"),
    ("rank0.pt.trace.json", b'{"traceEvents": [', "not a Kineto JSON trace"),
])
def test_diff_reads_each_kind_with_its_tools_loader(tmp_path: Path, name: str, body: bytes, said: str) -> None:
    (tmp_path / name).write_bytes(body)
    with pytest.raises(DiffInputError, match=said):
        load_profile([tmp_path / name], "auto")


def test_the_api_offers_each_tools_part_under_its_own_name() -> None:
    assert (api.load_traces, api.Traces) == (torch_api.load_traces, torch_api.Traces)
    assert (api.nsys_report, api.nsys_reports) == (nsys_api.nsys_report, nsys_api.nsys_reports)
    assert {"load_traces", "Traces", "nsys_report", "nsys_reports", "compare"} <= set(dir(api))
    with pytest.raises(AttributeError, match="has no attribute 'load_trace'"):
        api.load_trace  # noqa: B018
