"""A GPT-2 (124M) trainer as users write it, traced by torch.profiler: nanoGPT's model (12 layers,
768 wide, 12 heads, tied embeddings), DDP over the ranks torchrun starts, bf16 autocast, PyTorch's
SDPA (flash attention), fused AdamW, gradient clipping, random tokens. The profiler's schedule
marks each step (ProfilerStep#N): the fixture of tests/test_steps.py (its marks stripped, the
steps must be found again) and of tests/test_categories.py (kernel names of a bf16 trainer).

    torchrun --nproc_per_node 2 benchmarks/gpu/gpt2_kineto.py --out DIR [--steps 5]

Writes DIR/rank<N>.pt.trace.json.gz and DIR/steps.json (each rank's own step times, ms: from
before the batch is made to after a CUDA synchronize, the profiled steps included).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 (PyTorch's name)
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Block(nn.Module):
    """One transformer block (nanoGPT's: pre-norm attention and MLP)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn, self.attn_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.c_fc, self.mlp_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.c_attn(self.ln_1(x)).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2 124M: token and position embeddings, 12 blocks, a final norm, the tied LM head."""

    def __init__(self, vocab: int = 50304, block: int = 1024, layers: int = 12, width: int = 768, heads: int = 12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=5, help="profiled (active) steps")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    torch.manual_seed(1234 + rank)
    model = DistributedDataParallel(GPT(block=args.seq).cuda(), device_ids=[local])
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, fused=True)
    args.out.mkdir(parents=True, exist_ok=True)

    def write(prof: torch.profiler.profile) -> None:
        plain = args.out / f"rank{rank}.pt.trace.json"
        prof.export_chrome_trace(str(plain))
        with open(plain, "rb") as src, gzip.open(f"{plain}.gz", "wb", compresslevel=9) as out:
            shutil.copyfileobj(src, out)
        plain.unlink()

    wait, warmup = 3, 2
    times = []
    schedule = torch.profiler.schedule(wait=wait, warmup=warmup, active=args.steps, repeat=1)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=write) as prof:
        for _ in range(wait + warmup + args.steps):
            start = time.perf_counter()
            x = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
            y = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append(1000 * (time.perf_counter() - start))
            prof.step()
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, times)
    if rank == 0:
        (args.out / "steps.json").write_text(json.dumps({
            "model": "GPT-2 124M (nanoGPT's), DDP, bf16 autocast, SDPA, fused AdamW, clip 1.0",
            "batch": args.batch, "seq": args.seq, "wait": wait, "warmup": warmup, "active": args.steps,
            "torch": torch.__version__, "device": torch.cuda.get_device_name(), "step_ms": every}, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
