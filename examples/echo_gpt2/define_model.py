"""Echo-style define_model.py: a GPT-2-like decoder built from code (no downloads, no transformers).

The four functions have Echo's signatures and behaviour: `get_model` wraps the model in DDP with
`bucket_cap_mb=cap_size`, the data loader repeats one random token batch, `backward_pass` pushes
`last_hidden_state` back as its own gradient (Echo's fake loss).

`rank` is the device: a CUDA index on GPU, `torch.device("cpu")` on CPU.
Size: GPT2_PRESET=tiny (default, CPU-friendly) or gpt2 (768 wide, 12 layers, 12 heads, 512 tokens,
as Echo's example). GPT2_BATCHES sets the batches per epoch (default 100, as Echo).
"""

import os
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

PRESETS = {
    "tiny": {"vocab": 1000, "context": 64, "width": 64, "layers": 2, "heads": 4},
    "gpt2": {"vocab": 50257, "context": 512, "width": 768, "layers": 12, "heads": 12},
}
PRESET = PRESETS[os.environ.get("GPT2_PRESET", "tiny")]
BATCHES = int(os.environ.get("GPT2_BATCHES", "100"))


class GPT2Output(NamedTuple):
    last_hidden_state: torch.Tensor


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention + 4x GELU MLP."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """Token + position embeddings, a stack of blocks, a final LayerNorm (like HF GPT2Model)."""

    def __init__(self, vocab, context, width, layers, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return GPT2Output(self.ln_f(x))


def get_model(rank, cap_size):
    device = rank if isinstance(rank, torch.device) else torch.device("cuda", rank)
    model = GPT2(**PRESET).to(device)
    device_ids = [device.index] if device.type == "cuda" else None
    return DDP(model, device_ids=device_ids, bucket_cap_mb=cap_size)


def get_dataloader(rank, batchsize):
    example = (torch.LongTensor(batchsize, PRESET["context"]).random_() % 1000).to(rank)
    labels = torch.randint(0, 10, (batchsize,)).to(rank)
    return [(example, labels)] * BATCHES


def forward_pass(model, inputs):
    return model(inputs)


def backward_pass(output):
    output.last_hidden_state.backward(output.last_hidden_state)
