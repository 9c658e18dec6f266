"""Kernel categories a performance engineer reads: one table of name rules (RULES), first match
wins, extended by a site or experiment (`kernel_categories:`, hpcprof.config.categories), whose
rules come first (the experiment's, then the site's).

The categories: `nccl.<Collective>` (and `nccl.other`), `attention` (flash, SDPA, fused
multi-head attention, cuDNN's attention and the helpers of its backward), `conv` (cuDNN
convolutions), `gemm` (cuBLAS/cuBLASLt incl. Hopper's nvjet, CUTLASS, the xmma families),
`optimizer` (PyTorch's multi_tensor_apply: foreach and fused Adam/AdamW/SGD, the grad-norm and
unscale before them; fused Adam/LAMB of apex and DeepSpeed), `memset` (memsets and fill kernels),
`copy` (copies on the device: device-to-device and peer memcpys, copy, concatenation and layout
kernels), `memcpy` (the memcpys between host and device), `reduction` (sums and other reductions,
normalisations, softmax, losses, pooling), `elementwise` (TensorIterator and Triton pointwise
kernels, activations, dtype casts: PyTorch's copy kernels that load or store with a cast, its
bfloat16/half copy kernels), else `other`. Triton kernels of torch.compile are named by their
kind (triton_poi_ pointwise, triton_red_/per_ reductions, triton_tem_ templates). HTA's
COMM/COMP/MEM kernel types (trace/analyses.py) are HTA's own definition, kept apart.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hpcprof.analysis.nccl import NCCL_KERNEL

if TYPE_CHECKING:
    from hpcprof.run.record import RunRecord

OTHER = "other"
#: (category, pattern) in order: the first whose pattern is found in the name decides; a category's
#: `{group}` is the text of that named group of its pattern
RULES: tuple[tuple[str, str], ...] = (
    ("nccl.{collective}", NCCL_KERNEL),             # the one NCCL name rule (hpcprof.analysis.nccl)
    ("nccl.other", r"^nccl"),
    ("attention", r"(?i)flash|fmha|attention|_attn|sdpa|mha_fwd|mha_bwd|dot_do_o|convert_dq"),
    ("reduction", r"^triton_(?:red|per)_"),
    ("elementwise", r"^triton_poi_"),
    ("conv", r"(?i)conv(?!ert)|scudnn|winograd|wgrad|dgrad|fprop|implicit_?gemm|cudnn::cnn|cask_cudnn"),
    ("gemm", r"(?i)gemm|gemv|cutlass|cublas|nvjet|xmma|matmul|wgmma|_hmma|_imma|^triton_tem_"),
    ("optimizer", r"multi_tensor_apply|multi_tensor_(?:adam|lamb|sgd|l2norm|scale)|(?i:fused_?adam|adamw?_kernel|"
                  r"fused_?lamb|fused_?sgd)"),
    ("memset", r"(?i)^memset|\[CUDA memset|FillFunctor|fill_kernel"),
    ("elementwise", r"(?:bfloat16|float16|half)_copy_kernel|LoadWithCast|StoreWithCast"),     # dtype casts
    ("copy", r"(?i)memcpy (?:Device-to-Device|DtoD|Peer-to-Peer|PtoP)|direct_copy|copy_kernel|CatArray|cat_array|"
             r"transpose|To(?:Nhwc|Nchw)"),
    ("memcpy", r"(?i)^memcpy|\[CUDA memcpy"),
    ("reduction", r"(?i)reduce|reduction|norm(?!al)|GammaBeta|bn_(?:fw|bw)|welford|moments|softmax|nll_loss|"
                  r"cross_entropy|argmax|argmin|topk|_pool|pool_"),
    ("elementwise", r"(?i)elementwise|pointwise|Functor|gelu|relu|silu|dropout|activation"),
)


class Categories:
    """A kernel name's category by the rules given (user rules first, then RULES); each distinct
    name is matched once."""

    def __init__(self, extra: Iterable[tuple[str, str]] = ()) -> None:
        self.rules = tuple((category, re.compile(pattern)) for category, pattern in (*extra, *RULES))
        self._seen: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        got = self._seen.get(name)
        if got is None:
            got = self._seen[name] = self._match(name)
        return got

    def _match(self, name: str) -> str:
        for category, pattern in self.rules:
            found = pattern.search(name)
            if found:
                if "{" not in category:
                    return category
                groups = {k: re.sub(r"[^A-Za-z0-9_]", "_", v or "") or OTHER for k, v in found.groupdict().items()}
                return category.format(**groups)
        return OTHER

    def of(self, names: Iterable[object]) -> np.ndarray:
        """The category of each name (text of each value), as an object array."""
        listed = [str(n) for n in names]
        found = {n: self(n) for n in dict.fromkeys(listed)}
        out = np.empty(len(listed), dtype=object)
        out[:] = [found[n] for n in listed]
        return out


#: hpcprof's own rules alone
BUILTIN = Categories()


def kernel_category(name: str) -> str:
    """The category of a kernel name by hpcprof's own rules."""
    return BUILTIN(name)


def user_rules(record: RunRecord | None) -> tuple[tuple[str, str], ...]:
    """A run's `kernel_categories` rules: the experiment's (`analysis:`), then the site's."""
    if record is None:
        return ()
    return tuple((r.category, r.pattern)
                 for rules in (record.experiment.analysis.kernel_categories, record.site.kernel_categories)
                 for r in rules)


@functools.lru_cache(maxsize=32)
def _categories(rules: tuple[tuple[str, str], ...]) -> Categories:
    return Categories(rules) if rules else BUILTIN


def categories_for(record: RunRecord | None) -> Categories:
    """The categories of a run (its record): its experiment's and site's rules, then RULES."""
    return _categories(user_rules(record))


def run_categories(path: Path) -> Categories:
    """The categories of the run a profile file belongs to (record.profile_record); RULES for a file
    outside a run."""
    from hpcprof.run.record import profile_record

    try:
        return categories_for(profile_record(path))
    except re.error:   # a config.json edited by hand past render's check of its patterns
        return BUILTIN
