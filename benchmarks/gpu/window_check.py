"""Check window_campaign.sh's collected runs: per run, the window and capture metrics; exit 1 when
a seqpar float32 run's idle over the timed iterations is 10 % or more, a seqpar run has no window
of its timed iterations, or the never-opened run was collected clean.

    python benchmarks/gpu/window_check.py WORKDIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from hpcprof.analysis.summary import run_headline
from hpcprof.campaign.store import Store, database_url
from hpcprof.run.record import read_record
from hpcprof.run.results import read_table

SHOWN = ("window.duration", "window.iterations", "iteration.mean", "idle_pct", "capture.idle_pct",
         "overlap_pct", "capture.overlap_pct", "gpu.gemm.share", "capture.gpu.gemm.share")


def main(workdir: Path) -> int:
    store = Store(database_url(workdir))
    failures = []
    for config_path in sorted(workdir.glob("*/*/config.json")):
        run = config_path.parent
        run_record = read_record(config_path)
        experiment = run_record.experiment
        metrics = {name: value for name, value, _ in run_headline(run, run_record).metrics}
        record = store.run_record(run.name) or {}
        print(run.name, experiment.name, experiment.workload.args.get("precision", ""),
              "collect:", record.get("collect_status"),
              " ".join(f"{k}={metrics[k]:.4g}" for k in SHOWN if k in metrics))
        if experiment.name.startswith("window-seqpar"):
            window = read_table(run, "nsys_window")
            if window is None or not set(window["window"]) <= {"nvtx:timed", "nvtx:iteration"} or len(window) != 2:
                failures.append(f"{run.name}: no window of the timed iterations on both ranks")
            elif experiment.workload.args["precision"] == "float32" and metrics["idle_pct"] >= 10:
                failures.append(f"{run.name}: float32 idle over the timed iterations {metrics['idle_pct']:.2f} %")
        if experiment.name == "window-never-opened":
            note = record.get("collect_note") or ""
            if record.get("collect_status") != "partial" or "the capture range never opened" not in note:
                failures.append(f"{run.name}: a capture that recorded nothing was collected as "
                                f"{record.get('collect_status')!r}")
            print("  ", note.replace("\n", "\n   "))
    for line in failures:
        print("FAIL", line)
    print("window_check:", "FAILED" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
