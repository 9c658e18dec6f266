"""Concatenating per-rank tables as they stream in (hpcprof.core.pool.concat_frames, used by the
`hpcprof nsys` cross-rank commands over N rank files), against one pd.concat and the scheme it replaced.

Per N: N frames of `--rows` rows (a rank's NCCL rows: an int, a float and a text column) made
up front, then CPU seconds (process time, best of --repeat) of
  once      one pd.concat of the whole list (holds every small frame at once: the memory the
            streaming merge exists to avoid; pandas' own cost per frame makes it no floor);
  levels    concat_frames: merged 64 at a time by levels (Compacting), each row copied O(log N) times;
  whole     the scheme before: the whole merged frame merged again with every 64 new frames
            (each row copied N/64 times: quadratic).
Prints the ratios levels/once and whole/levels; every result equals `once`'s.

    python benchmarks/concat_scale.py [--sizes 1024,4096,16384] [--rows 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hpcprof.core.pool import concat_frames  # noqa: E402


def whole(frames: list[pd.DataFrame], every: int = 64) -> pd.DataFrame:
    """The scheme before Compacting: every `every` frames, the whole pending list merged into one."""
    pending: list[pd.DataFrame] = []
    for frame in frames:
        pending.append(frame)
        if len(pending) >= every:
            pending = [pd.concat(pending, ignore_index=True)]
    return pd.concat(pending, ignore_index=True)


def best(fn: Callable[[list[pd.DataFrame]], pd.DataFrame | None], frames: list[pd.DataFrame],
         repeat: int) -> tuple[float, pd.DataFrame]:
    times, out = [], None
    for _ in range(repeat):
        start = time.process_time()
        out = fn(frames)
        times.append(time.process_time() - start)
    assert out is not None
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,4096,16384")
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"# concat_scale: {args.rows} rows per frame, CPU s best of {args.repeat}")
    print(f"{'N':>6} {'once s':>8} {'levels s':>9} {'whole s':>8} {'levels/once':>12} {'whole/levels':>12}")
    for n in [int(s) for s in args.sizes.split(",") if s]:
        frames = [pd.DataFrame({"rank": np.full(args.rows, rank), "time": np.arange(args.rows, dtype=float),
                                "collective": ["allreduce"] * args.rows}) for rank in range(n)]
        once, expected = best(lambda fs: pd.concat(fs, ignore_index=True), frames, args.repeat)
        levels, got = best(lambda fs: concat_frames(iter(fs)), frames, args.repeat)
        before, old = best(whole, frames, args.repeat)
        pd.testing.assert_frame_equal(got, expected)
        pd.testing.assert_frame_equal(old, expected)
        print(f"{n:>6} {once:>8.3f} {levels:>9.3f} {before:>8.3f} {levels / once:>11.2f}x {before / levels:>11.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
