"""A small real memory snapshot with a planted leak, for memory.sh: `python leak_snapshot.py OUT.pickle`.
One GPU; PyTorch's memory history recorded (Python stacks) over 12 training steps of a small MLP,
each step also keeping a block that grows by 8 MiB a step (the leak, one line: `leak.append`);
then torch.cuda.memory._dump_snapshot. Prints the leak's line and the program's own peak."""

from __future__ import annotations

import inspect
import sys

import torch


def train(steps: int, leak: list[torch.Tensor]) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2048, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 2048)).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    for step in range(steps):
        loss = model(torch.randn(512, 2048, device="cuda")).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        leak.append(torch.empty((step + 1) * (8 << 20), dtype=torch.uint8, device="cuda"))  # the planted leak


def main() -> None:
    torch.cuda.memory._record_memory_history(max_entries=20000, stacks="python")
    leak: list[torch.Tensor] = []
    train(12, leak)
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(sys.argv[1])
    torch.cuda.memory._record_memory_history(enabled=None)
    line = next(n for n, text in enumerate(inspect.getsource(sys.modules[__name__]).splitlines(), 1)
                if "leak.append(" in text and "the planted leak" in text)
    print(f"leak line: leak_snapshot.py:{line} train; max_memory_allocated {torch.cuda.max_memory_allocated()}; "
          f"max_memory_reserved {torch.cuda.max_memory_reserved()}")


if __name__ == "__main__":
    main()
