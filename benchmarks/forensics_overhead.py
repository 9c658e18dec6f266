"""What the forensics arming (hpcprof.config.forensics) costs a running program: the same
multi-rank run with and without it, interleaved (plain, armed, armed, plain, ...: drift on a shared
machine falls on both), for three programs under this Python's `mpiexec` (the mpich wheel):

- `seqpar`: hpcprof's sequence-parallel step (all-gather, two matmuls, reduce-scatter), its
  per-iteration times from results/seqpar.json (a step: the slowest rank's median iteration);
- `trainer`: a small DDP trainer (an MLP, AdamW), forward + backward + optimizer step timed per step;
- `collectives`: back-to-back small all-reduces, the worst case: the Flight Recorder records one
  entry (and its Python stack) per collective;
- `startup`: `python -c "import torch"` (the hook's own start-up, once per rank: its wall and CPU time);
- `record`: the fastest of 30 batches of 500 small all-reduces (each batch after a barrier): the
  Flight Recorder's cost per collective with the least noise a shared machine allows (printed in
  µs per collective; a step's share is that times its collectives).

Armed = what the rank wrapper sets for a run with `forensics.enabled: true`
(hpcprof.render.forensics.forensics_env, the start-up hook first on PYTHONPATH); plain = neither.
Printed per program: the median step of each variant over the repetitions and the overhead, the
median of the paired (same repetition) ratios, with their range; for trainer and collectives also
the CPU time of a step (all the rank's threads: less disturbed than wall time on a busy machine). Runs on CPU (gloo) here; on a GPU
machine `--device cuda` (NCCL, one GPU per rank).

    python benchmarks/forensics_overhead.py [--ranks 2] [--repeat 5] [--device auto|cpu|cuda]
        [--seqpar-args "--sequence-length 2048 --hidden-dim 1024"] [--steps 40] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def rank_layout() -> tuple[int, int, int]:
    """Rank, world size and local rank under Hydra's mpiexec (or Open MPI's, on the GPU machine)."""
    env = os.environ
    if "OMPI_COMM_WORLD_RANK" in env:
        return (int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"]),
                int(env["OMPI_COMM_WORLD_LOCAL_RANK"]))
    return int(env["PMI_RANK"]), int(env["PMI_SIZE"]), int(env.get("MPI_LOCALRANKID", env["PMI_RANK"]))


def rank_program(kind: str, steps: int, warmup: int, device_kind: str, rendezvous: str, out: Path,
                 shape: tuple[int, int] = (0, 64)) -> None:
    """One rank of `trainer` or `collectives`: its step times (s) to OUT/rank<N>.json; `shape` is the
    trainer's (width, batch), width 0: 1024 on a GPU, 256 on the CPU."""
    import torch
    import torch.distributed as dist
    from torch import nn

    rank, world, local = rank_layout()
    cuda = torch.cuda.is_available() if device_kind == "auto" else device_kind == "cuda"
    device = torch.device("cuda", local % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world)
    torch.manual_seed(rank)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    if kind == "trainer":
        width = shape[0] or (1024 if cuda else 256)
        layers: list[nn.Module] = []
        for _ in range(6):
            layers += [nn.Linear(width, width), nn.GELU()]
        model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers).to(device),
                                                    device_ids=[device] if cuda else None, bucket_cap_mb=1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(shape[1], width, device=device)
        y = torch.randn(shape[1], width, device=device)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            loss = (model(x) - y).pow(2).mean()
            loss.backward()
            optimizer.step()
    else:
        t = torch.ones(16, device=device)
        count = 500 if kind == "record" else 50

        def step() -> None:
            if kind == "record":
                dist.barrier()
            for _ in range(count):
                dist.all_reduce(t)
    wall, cpu = [], []
    for i in range(warmup + steps):
        sync()
        start, start_cpu = time.perf_counter(), time.process_time()
        step()
        sync()
        if i >= warmup:
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    dist.barrier()
    dist.destroy_process_group()
    if kind == "record":  # µs per collective, the fastest batch
        wall, cpu = [min(wall) / count * 1e3], [min(cpu) / count * 1e3]
    (out / f"rank{rank}.json").write_text(json.dumps({"wall": wall, "cpu": cpu}))


def mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        raise SystemExit("no mpiexec beside this Python nor on PATH (pip install mpich)")
    return found


def armed_env(run_dir: Path, ranks: int) -> dict[str, str]:
    """The rank environment of a run with forensics armed, as the rank wrapper makes it."""
    from hpcprof.config.forensics import ForensicsConfig
    from hpcprof.render.forensics import INJECT_DIR, INJECT_FILES, forensics_env

    inject = run_dir / "inject"
    inject.mkdir(parents=True, exist_ok=True)
    for name in INJECT_FILES:
        shutil.copy(INJECT_DIR / name, inject / name)
    return {**forensics_env(ForensicsConfig(), ranks, run_dir), "HPCPROF_RUN_DIR": str(run_dir),
            "PYTHONPATH": os.pathsep.join([str(inject), str(REPO)])}


def one_run(program: str, armed: bool, work: Path, args: argparse.Namespace) -> tuple[float, float | None]:
    """One run of `program`: its step time in ms (the slowest rank's median step) and, for trainer
    and collectives, the CPU time of a step (all threads of the rank, the busiest rank's median)."""
    run_dir = Path(tempfile.mkdtemp(dir=work))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCPROF_", "TORCH_FR", "TORCH_NCCL"))}
    env.update(armed_env(run_dir, args.ranks) if armed else {"PYTHONPATH": str(REPO)})
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    out = run_dir / "out"
    out.mkdir()
    if program == "startup":
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], env=env, check=True, cwd=run_dir)
        after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - start
        shutil.rmtree(run_dir, ignore_errors=True)
        return wall * 1e3, (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e3
    if program == "seqpar":
        argv = [sys.executable, "-m", "hpcprof.workloads.seqpar", "--device", args.device, "--results-dir", str(out),
                *shlex.split(args.seqpar_args)]
    else:
        steps = 30 if program == "record" else args.steps
        argv = [sys.executable, __file__, "--rank-program", program, "--steps", str(steps), "--device",
                args.device, "--rendezvous", str(run_dir / "rendezvous"), "--out", str(out),
                "--trainer-width", str(args.trainer_width), "--trainer-batch", str(args.trainer_batch)]
    root = ["--allow-run-as-root", "--oversubscribe"] if os.geteuid() == 0 and "Open MPI" in subprocess.run(
        [mpiexec(), "--version"], capture_output=True, text=True).stdout else []     # the GPU machine's Open MPI
    proc = subprocess.run([mpiexec(), *root, "-n", str(args.ranks), *argv], env=env, capture_output=True, text=True,
                          timeout=1800, cwd=run_dir)
    if proc.returncode != 0:
        raise SystemExit(f"{program} ({'armed' if armed else 'plain'}) failed ({proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    if armed and not (run_dir / "forensics").is_dir():
        raise SystemExit(f"{program}: the armed run left no forensics directory: the hook did not run")
    if program == "seqpar":
        rows = json.loads((out / "seqpar.json").read_text())["iterations"]
        per_rank: dict[int, list[float]] = {}
        for row in rows:
            if row["phase"] == "iteration":
                per_rank.setdefault(row["rank"], []).append(row["time_ms"])
        step, cpu = max(statistics.median(v) for v in per_rank.values()), None
    else:
        ranks = [json.loads(p.read_text()) for p in out.glob("rank*.json")]
        step = max(statistics.median(r["wall"]) for r in ranks) * 1e3
        cpu = max(statistics.median(r["cpu"]) for r in ranks) * 1e3
    shutil.rmtree(run_dir, ignore_errors=True)
    return step, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5, help="pairs of runs per program")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--seqpar-args", default="--sequence-length 2048 --hidden-dim 512 --iterations 40 "
                                                 "--warmup-iterations 5",
                        help="seqpar's own flags (python -m hpcprof.workloads.seqpar -h)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps of trainer and collectives")
    parser.add_argument("--trainer-width", type=int, default=0,
                        help="the trainer's layer width (0: 1024 on a GPU, 256 on the CPU)")
    parser.add_argument("--trainer-batch", type=int, default=64, help="the trainer's batch (rows)")
    parser.add_argument("--programs", default="startup,record,seqpar,trainer,collectives")
    parser.add_argument("--out", type=Path, help="also write the results here (JSON)")
    parser.add_argument("--rank-program", choices=["trainer", "collectives", "record"], help=argparse.SUPPRESS)
    parser.add_argument("--rendezvous", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_program:
        rank_program(args.rank_program, args.steps, 5, args.device, args.rendezvous, Path(args.out),
                     (args.trainer_width, args.trainer_batch))
        return
    work = Path(tempfile.mkdtemp(prefix="forensics-overhead-"))
    results = []
    try:
        for program in args.programs.split(","):
            runs: dict[bool, list[tuple[float, float | None]]] = {False: [], True: []}
            for r in range(args.repeat):
                for variant in ((False, True) if r % 2 == 0 else (True, False)):
                    runs[variant].append(one_run(program, variant, work, args))
            for measure, index in (("wall", 0), ("cpu", 1)):
                plain = [float(v) for x in runs[False] if (v := x[index]) is not None]
                armed = [float(v) for x in runs[True] if (v := x[index]) is not None]
                if not plain or not armed:
                    continue
                ratios = [a / p - 1 for a, p in zip(armed, plain, strict=True)]
                row = {"program": program, "measure": measure, "plain_ms": statistics.median(plain),
                       "armed_ms": statistics.median(armed), "overhead_pct": 100 * statistics.median(ratios),
                       "paired_min_pct": 100 * min(ratios), "paired_max_pct": 100 * max(ratios),
                       "plain_runs_ms": plain, "armed_runs_ms": armed}
                results.append(row)
                unit = "µs/op" if program == "record" else "ms"
                print(f"{program:<12} {measure:<4} plain {row['plain_ms']:9.3f} {unit}  armed {row['armed_ms']:9.3f} "
                      f"{unit}  overhead {row['overhead_pct']:+6.2f} % (paired runs {row['paired_min_pct']:+.2f} .. "
                      f"{row['paired_max_pct']:+.2f} %)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.ranks} ranks, {args.repeat} pairs per program, device {args.device}, python {sys.version.split()[0]}")
    if args.out:
        args.out.write_text(json.dumps({"ranks": args.ranks, "repeat": args.repeat, "device": args.device,
                                        "results": results}, indent=1))


if __name__ == "__main__":
    main()
