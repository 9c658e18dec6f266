"""A Hugging Face `Trainer` script as its docs write one (transformers' "Fine-tune a pretrained
model" and TrainingArguments pages): GPT-2 124M built from its config (no download), a dataset of
random tokens, bf16, DDP over the ranks torchrun started. Nothing in it knows hpcprof: the step
hook finds the Trainer's optimizer steps.

    python3 hf_trainer.py [--steps 30] [--batch 8] [--seq 512] [--layers 12] [--width 768]
"""

from __future__ import annotations

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    """`size` sequences of `seq` random tokens, their own labels (causal LM)."""

    def __init__(self, size: int, seq: int, vocab: int) -> None:
        self.tokens = torch.randint(vocab, (size, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


def main() -> None:
    parser = argparse.ArgumentParser()
    for name, default in (("steps", 30), ("batch", 8), ("seq", 512), ("layers", 12), ("width", 768),
                          ("heads", 12)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    config = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=args.heads, n_positions=args.seq)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir="/tmp/hf-trainer-out", max_steps=args.steps, per_device_train_batch_size=args.batch,
        learning_rate=3e-4, bf16=cuda, use_cpu=not cuda, logging_steps=10, save_strategy="no",
        report_to="none", disable_tqdm=True, dataloader_drop_last=True, ddp_find_unused_parameters=False)
    dataset = RandomTokens(args.steps * args.batch * max(1, training.world_size), args.seq, config.vocab_size)
    Trainer(model=model, args=training, train_dataset=dataset).train()


if __name__ == "__main__":
    main()
