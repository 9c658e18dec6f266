"""A Lightning DDP script as Lightning's docs write one (the README's LightningModule and the
`lightning.pytorch.demos.Transformer` language model of its examples): a 6-layer transformer LM
on random tokens, `Trainer(strategy="ddp")` over the ranks torchrun started, bf16 mixed precision.
Nothing in it knows hpcprof: the step hook finds Lightning's optimizer steps.

    python3 lightning_ddp.py [--steps 30] [--batch 32] [--seq 256] [--layers 6] [--width 512]
"""

from __future__ import annotations

import argparse
import os

import lightning as L  # noqa: N812 (Lightning's name)
import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's name)
from lightning.pytorch.demos import Transformer
from torch.utils.data import DataLoader, TensorDataset


class LanguageModel(L.LightningModule):
    def __init__(self, vocab: int, width: int, layers: int) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab, ninp=width, nhead=8, nhid=4 * width, nlayers=layers)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, target = batch
        output = self.model(inputs, target)
        return F.nll_loss(output, target.view(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name, default in (("steps", 30), ("batch", 32), ("seq", 256), ("layers", 6), ("width", 512),
                          ("vocab", 33278)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    devices = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    tokens = torch.randint(args.vocab, (args.steps * args.batch * devices, args.seq + 1),
                           generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=args.batch)
    trainer = L.Trainer(accelerator="gpu" if cuda else "cpu", devices=devices, strategy="ddp",
                        max_steps=args.steps, precision="bf16-mixed" if cuda else "32-true", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(LanguageModel(args.vocab, args.width, args.layers), data)


if __name__ == "__main__":
    main()
