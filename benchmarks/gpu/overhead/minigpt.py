"""A small nanoGPT-style GPT trainer as users write it (written from PyTorch's public docs and
nanoGPT's README): pre-norm transformer blocks, PyTorch's scaled_dot_product_attention, tied
embeddings, DDP over the ranks the launcher started (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR;
GPU LOCAL_RANK of those visible, cuda:0 where CUDA_VISIBLE_DEVICES names one per rank),
bf16 autocast, fused AdamW, random tokens. Nothing in it knows hpcprof: the step hook finds its
optimizer steps.

    python3 minigpt.py [--steps 30] [--layers 6] [--width 384] [--batch 16] [--block 256]
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 (PyTorch's name)
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Block(nn.Module):
    """Pre-norm attention and MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(w, dim=2)
        q, k, v = (z.view(b, t, self.heads, w // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, w)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, layers: int, width: int, heads: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight      # tied embeddings

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def main() -> None:
    parser = argparse.ArgumentParser()
    for name, default in (("steps", 30), ("layers", 6), ("width", 384), ("heads", 6), ("batch", 16),
                          ("block", 256), ("vocab", 50304)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    # the launcher's CUDA_VISIBLE_DEVICES may leave each rank only its own GPU (then cuda:0)
    device = local % torch.cuda.device_count()
    torch.cuda.set_device(device)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl")
    torch.manual_seed(1234 + local)
    model = GPT(args.vocab, args.block, args.layers, args.width, args.heads).cuda()
    net = DistributedDataParallel(model, device_ids=[device]) if distributed else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    for step in range(args.steps):
        start = time.perf_counter()
        idx = torch.randint(args.vocab, (args.batch, args.block + 1), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = net(idx[:, :-1], idx[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 10 == 0 and int(os.environ.get("RANK", "0")) == 0:
            print(f"iter {step}: loss {loss.item():.3f}, {1e3 * (time.perf_counter() - start):.1f} ms", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
