"""Reading a PyTorch memory snapshot as plain data (hpcprof.core.safe_pickle, what `hpcprof memory` and
forensics read), against `pickle.loads` of the same bytes: the floor (the unpickler with nothing
checked, which would run any code the file names).

The snapshot is the H200 leak program's (tests/fixtures/gpu/memory/leak_snapshot.pickle, 68 kB),
its segments repeated to `--scale` times their number so that a large model's snapshot (hundreds of
MB) is timed too. Per size: CPU seconds (process time, best of --repeat) of each, the ratio
safe/floor, and the MB/s read; both results are checked equal.

    python benchmarks/safe_pickle_speed.py [--scales 1,100,1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcprof.core import safe_pickle  # noqa: E402

SNAPSHOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gpu" / "memory" / "leak_snapshot.pickle"


def best(call: object, data: bytes, repeat: int) -> tuple[float, object]:
    """The least process time of `repeat` calls of `call(data)`, and its result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.process_time()
        result = call(data)  # type: ignore[operator]
        times.append(time.process_time() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="1,100,1000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    base = pickle.loads(SNAPSHOT.read_bytes())
    print(f"{'scale':>6} {'MB':>8} {'pickle s':>9} {'safe s':>9} {'safe/floor':>11} {'safe MB/s':>10}")
    for scale in (int(s) for s in args.scales.split(",")):
        segments = [s for _ in range(scale) for s in pickle.loads(pickle.dumps(base["segments"]))]  # copies, not references
        data = pickle.dumps({**base, "segments": segments}, protocol=4)
        floor, expected = best(pickle.loads, data, args.repeat)
        safe, got = best(safe_pickle.loads, data, args.repeat)
        assert got == expected
        mb = len(data) / 1e6
        print(f"{scale:>6} {mb:>8.1f} {floor:>9.3f} {safe:>9.3f} {safe / floor:>11.2f} {mb / safe:>10.1f}")


if __name__ == "__main__":
    main()
