"""Kernel categories a performance engineer reads: one table of name rules
(hpcprof/analysis/categories.py), checked against hand classifications of the kernels of two real
GPT-2 trainers (tests/data/kernel_categories_gpt2*.tsv), extended by a site's and an experiment's
`kernel_categories:`, and used for the `gpu.<category>` metrics."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import msgspec
import pandas as pd
import pytest
import yaml
from hpcprof_cli import hpcprof

from hpcprof.analysis.categories import BUILTIN, categories_for, kernel_category
from hpcprof.analysis.summary import run_summary, tables_of
from hpcprof.run.record import RunRecord
from hpcprof.run.results import write_table
from hpcprof.tools.torch.analysis.load import load_trace

DATA = Path(__file__).resolve().parent / "data"
CLI_ENV = {"HPCPROF_SITE_PATH": "", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
#: the trainers' traces (tests/fixtures/hta/) and their hand classifications (tests/data/)
TRAINERS = {"h200_ddp_gpt2": "kernel_categories_gpt2.tsv", "h200_ddp_gpt2_bf16": "kernel_categories_gpt2_bf16.tsv"}


def hand_categories(trainer: str) -> dict[str, str]:
    """A trainer's hand classification: kernel name -> category."""
    rows = [line.split("\t", 1) for line in (DATA / TRAINERS[trainer]).read_text().splitlines()
            if line and not line.startswith("#")]
    return {name: category for category, name in rows}


@pytest.mark.parametrize("trainer, names", [("h200_ddp_gpt2", 51), ("h200_ddp_gpt2_bf16", 63)])
def test_rules_agree_with_the_hand_classification(trainer: str, names: int) -> None:
    """Each distinct GPU kernel, memcpy and memset name of two GPT-2 DDP trainers (fp32 with
    memory-efficient attention and foreach AdamW; bf16 with cuDNN's flash attention, fused AdamW
    and gradient clipping) gets the category given by hand."""
    hand = hand_categories(trainer)
    assert len(hand) == names
    wrong = {name: (category, kernel_category(name)) for name, category in hand.items()
             if kernel_category(name) != category}
    assert wrong == {}


@pytest.mark.parametrize("trainer, other_pct, first", [
    ("h200_ddp_gpt2", 0.18, ["gemm", "nccl.AllReduce", "attention", "optimizer"]),
    ("h200_ddp_gpt2_bf16", 0.55, ["nccl.AllReduce", "gemm", "elementwise", "reduction"]),
])
def test_other_is_small_on_gpt2_trainers(fixtures_dir: Path, trainer: str, other_pct: float,
                                         first: list[str]) -> None:
    """GPU time by category over both ranks of each trainer's trace: `other` (embedding backward's
    sort and scatter kernels) stays under 10 % (0.18 % and 0.55 %)."""
    time_us: collections.Counter[str] = collections.Counter()
    hand = hand_categories(trainer)
    for rank in (0, 1):
        gpu = load_trace(fixtures_dir / "hta" / trainer / f"rank{rank}.pt.trace.json.gz", rank).gpu.frame()
        for name, dur in gpu.groupby(gpu["name"].astype(str), observed=True)["dur"].sum().items():
            assert kernel_category(name) == hand[name]
            time_us[kernel_category(name)] += dur
    share = {c: 100 * t / sum(time_us.values()) for c, t in time_us.items()}
    assert share["other"] < 10 and round(share["other"], 2) == other_pct
    assert [c for c, _ in collections.Counter(share).most_common(4)] == first


@pytest.mark.parametrize("name, category", [
    ("flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "attention"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16", "conv"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "FusedOptimizerTensorListMetadata<3>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>", "optimizer"),
    ("triton_red_fused__to_copy_add_native_layer_norm_0", "reduction"),
    ("triton_poi_fused_gelu_1", "elementwise"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>", "reduction"),
    ("void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, 4, normal_kernel>", "elementwise"),
    ("[CUDA memcpy Host-to-Device]", "memcpy"), ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
    ("[CUDA memcpy Device-to-Device]", "copy"), ("[CUDA memcpy Peer-to-Peer]", "copy"), ("[CUDA memset]", "memset"),
    ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::bfloat16_copy_kernel_cuda("
     "at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)",
     "elementwise"),
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::"
     "direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]>(at::TensorIteratorBase &, const T1 &)",
     "copy"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl.ReduceScatter"),
    ("ncclDevKernel_Generic_4", "nccl.Generic"), ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "nccl.AllReduce"),
    ("some_vendor_kernel", "other"),
])
def test_categories_of_other_trainers_kernels(name: str, category: str) -> None:
    assert kernel_category(name) == category


def record(config: dict[str, Any]) -> RunRecord:
    """A run record of the parts of a config.json given (the rest as an empty command run)."""
    experiment = {"name": "e", "workload": {"kind": "command"}, "profile": {"tool": "nsys"},
                  **config.get("experiment", {})}
    return msgspec.convert({"site": {}, "sweep_point": {}, **config, "experiment": experiment}, RunRecord)

def test_site_and_experiment_rules_come_first() -> None:
    """The experiment's rules, then the site's, then hpcprof's; a `{group}` takes its named group."""
    config = {"experiment": {"analysis": {"kernel_categories": [{"category": "moe", "pattern": "topk_gating|moe_"}]}},
              "site": {"kernel_categories": [{"category": "moe.{kind}", "pattern": r"^moe_(?P<kind>\w+?)_kernel"},
                                             {"category": "attention.paged", "pattern": "paged_attention"}]}}
    cats = categories_for(record(config))
    assert cats("moe_align_kernel") == "moe"                          # the experiment's rule first
    assert categories_for(record({"site": config["site"]}))("moe_align_kernel") == "moe.align"
    assert cats("vllm::paged_attention_v2_kernel<bf16>") == "attention.paged"
    assert cats("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == "gemm" == BUILTIN("nvjet_sm90_tst_256x128")
    assert categories_for(record({})) is BUILTIN and categories_for(None) is BUILTIN


def test_gpu_metrics_use_the_runs_rules(tmp_path: Path) -> None:
    """`gpu.<category>` per rank (mean over ranks) over the window, with the run's own rules, the
    shares adding up to 100 %."""
    kernels = pd.DataFrame({"rank": [0, 0, 0, 1, 1], "window": "nvtx:step",
                            "name": ["nvjet_sm90_tst_256x128", "moe_align_block_size_kernel", "flash_fwd_kernel",
                                     "nvjet_sm90_tst_256x128", "moe_align_block_size_kernel"],
                            "instances": 1, "total_ns": [4_000_000, 2_000_000, 1_000_000, 6_000_000, 2_000_000]})
    write_table(tmp_path, "nsys_kernels", kernels)
    config = {"experiment": {"workload": {"kind": "command"}, "profile": {"tool": "nsys"},
                             "analysis": {"kernel_categories": [{"category": "moe", "pattern": "moe_"}]}}}
    metrics = {m: v for m, v, _ in run_summary(tables_of(tmp_path, categories_for(record(config))), record(config))}
    assert metrics["gpu.gemm"] == 5.0 and metrics["gpu.moe"] == 2.0 and metrics["gpu.attention"] == 0.5
    assert metrics["gpu.total"] == 7.5 and "gpu.other" not in metrics
    assert sum(v for m, v in metrics.items() if m.endswith(".share")) == pytest.approx(100)
    del config["experiment"]["analysis"]
    assert {m: v for m, v, _ in run_summary(tables_of(tmp_path, categories_for(record(config))),
                                             record(config))}["gpu.other"] == 2.0


@pytest.mark.parametrize("rules, field, needle", [
    ([{"category": "moe", "pattern": "moe_(align"}], "analysis.kernel_categories.0.pattern", "not a regular expression"),
    ([{"category": "moe", "pattern": ".*"}], "analysis.kernel_categories.0.pattern", "matches every kernel name"),
    ([{"category": "1moe", "pattern": "moe_"}], "analysis.kernel_categories.0.category", "not a category"),
    ([{"category": "moe.{kind}", "pattern": "moe_"}], "analysis.kernel_categories.0.category", "no such named group"),
], ids=["bad-regex", "matches-all", "bad-name", "missing-group"])
def test_bad_rules_are_one_line_errors(tmp_path: Path, rules: list[dict[str, str]], field: str, needle: str) -> None:
    experiment = {"name": "cat", "workload": {"kind": "command", "argv": ["true"]}, "analysis": {"kernel_categories": rules}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(experiment))
    result = hpcprof("render", "exp.yaml", "-o", str(tmp_path / "out"), cwd=tmp_path, env=CLI_ENV)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert f"field '{field}'" in result.stderr and needle in result.stderr and "Traceback" not in result.stderr


def test_a_sites_bad_rule_names_its_field(tmp_path: Path) -> None:
    site = yaml.safe_load((Path(__file__).resolve().parents[1] / "site_configs" / "local.yaml").read_text())
    site["kernel_categories"] = [{"category": "moe", "pattern": "[unclosed"}]
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    (tmp_path / "exp.yaml").write_text(json.dumps({"name": "cat", "workload": {"kind": "command", "argv": ["true"]}}))
    result = hpcprof("render", "exp.yaml", "--site-file", "site.yaml", "-o", str(tmp_path / "out"), cwd=tmp_path,
                     env=CLI_ENV)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "field 'kernel_categories.0.pattern'" in result.stderr and "not a regular expression" in result.stderr
