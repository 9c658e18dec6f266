"""Transfer against wait per collective across ranks (hpcprof.analysis.collective_wait): the hand-built
schedule of test_critical_path (3 ranks, known delays, each rank on its own clock) as Kineto traces and
nsys exports, its answer recomputed here from the schedule's own times; the real 2xH200 DDP trace
against the bus bandwidth table's independent view of which rank arrives last."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from test_critical_path import simulate, write_kineto, write_nsys_export

from hpcprof.analysis.collective_wait import transfer_wait
from hpcprof.cli import main
from hpcprof.tools.torch.analysis import critical_path as trace_cp

HTA = Path(__file__).parent / "fixtures" / "hta"


def by_hand() -> dict[str, dict]:
    """Per collective type, from the simulated ops (iterations 0..3): each instance's kernels on the
    ranks, the shortest one its transfer, every rank's excess its wait, the strictly last rank."""
    ops = simulate()
    out: dict[str, dict] = {}
    for i, op in enumerate(ops[0]):
        if op["iteration"] < 0 or not op["collective"]:
            continue
        durs = [ops[r][i]["end"] - ops[r][i]["start"] for r in range(len(ops))]
        got = out.setdefault(op["collective"], {"n": 0, "transfer": 0, "wait": [0] * len(ops), "last": []})
        got["n"] += 1
        got["transfer"] += min(durs)
        for r, d in enumerate(durs):
            got["wait"][r] += d - min(durs)
        if max(durs) > min(durs):
            got["last"].append(durs.index(min(durs)))
    return out


def check(table: pd.DataFrame) -> None:
    hand = by_hand()
    assert sorted(table.loc[table["scope"] == "all", "collective"]) == sorted(hand) == ["AllGather", "ReduceScatter"]
    for kind, want in hand.items():
        every = table[(table["scope"] == "all") & (table["collective"] == kind)].iloc[0]
        ranks = table[(table["scope"] == "rank") & (table["collective"] == kind)].set_index("rank")
        assert every["instances"] == want["n"] == 4 and every["ranks"] == 3
        assert every["transfer_ns"] == pytest.approx(want["transfer"] / want["n"], abs=0.1)
        assert every["wait_ns"] == pytest.approx(sum(want["wait"]) / (3 * want["n"]), abs=0.1)
        assert every["kernel_ns"] == pytest.approx(every["transfer_ns"] + every["wait_ns"], abs=0.2)
        top = max(sorted(set(want["last"])), key=want["last"].count)
        assert every["last_rank"] == top and every["last_pct"] == 100 * want["last"].count(top) / want["n"]
        for r in range(3):
            assert ranks.loc[r, "wait_ns"] == want["wait"][r] and ranks.loc[r, "transfer_ns"] == want["transfer"]
            assert ranks.loc[r, "kernel_ns"] == want["transfer"] + want["wait"][r]
    # the planted delays, as waits: rank 2's host late before iteration 0's all-gather (ranks 0 and 1
    # wait for it), rank 1's matmul2 (iteration 1) and rank 2's matmul1 (iteration 3) before the reduce-scatters
    ag, rs = (table[(table["scope"] == "rank") & (table["collective"] == k)].set_index("rank")["wait_ns"]
              for k in ("AllGather", "ReduceScatter"))
    assert ag.tolist() == [50_000, 50_000, 0]
    assert rs.tolist() == [123_457 + 77_777, 77_777, 123_457]


def test_hand_built_kineto_traces_split_transfer_and_wait(tmp_path: Path) -> None:
    paths = []
    for rank, ops in enumerate(simulate()):
        paths.append(tmp_path / f"rank{rank}.pt.trace.json.gz")
        write_kineto(paths[-1], rank, [o for o in ops if o["iteration"] >= 0], rank * 3_000_011, with_seq=True)
    events, errors = trace_cp.load_events(paths)
    assert errors == []
    check(transfer_wait(events))
    res = CliRunner().invoke(main, ["trace", "critical-path", "--waits", *map(str, paths), "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0].startswith("scope,collective,rank,instances,ranks,kernel_ns,transfer_ns,wait_ns")
    res = CliRunner().invoke(main, ["trace", "critical-path", "--waits", "--segments", *map(str, paths)])
    assert res.exit_code == 2 and "give one of them" in res.output


def test_hand_built_nsys_exports_split_transfer_and_wait(tmp_path: Path) -> None:
    paths = []
    for rank, ops in enumerate(simulate()):
        paths.append(tmp_path / f"rank{rank}.sqlite")
        write_nsys_export(paths[-1], rank, ops, clock_offset=rank * 1_000_003 + 17)
    res = CliRunner().invoke(main, ["nsys", "critical-path", "--waits", *map(str, paths), "--format", "csv"])
    assert res.exit_code == 0, res.output
    from io import StringIO

    check(pd.read_csv(StringIO(res.stdout)).astype({"rank": "Int64", "last_rank": "Int64"}))


def test_an_instance_on_one_rank_and_no_events_give_no_rows() -> None:
    one = pd.DataFrame({"rank": [0], "iteration": [0], "kind": ["collective"], "channel": ["pg"], "seq": [0],
                        "name": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"], "start": [0], "end": [10],
                        "prev_channel": [""], "prev_seq": [-1]})
    assert transfer_wait(one).empty and transfer_wait(one.iloc[:0]).empty


def test_h200_ddp_last_rank_is_the_one_with_the_highest_busbw() -> None:
    """DDP on 2xH200: rank 1 reaches the all-reduces last (its kernels the shortest), so rank 0 waits
    most of its all-reduce time; the bus bandwidth table, from the same kernels' sizes and medians,
    names rank 1 as the fastest (a kernel's time includes its wait) in every size bucket."""
    paths = sorted((HTA / "h200_ddp_gpt2").glob("rank*.json.gz"))
    events, _ = trace_cp.load_events(paths)
    table = transfer_wait(events)
    every = table[table["scope"] == "all"].set_index("collective").loc["AllReduce"]
    ranks = table[(table["scope"] == "rank") & (table["collective"] == "AllReduce")].set_index("rank")
    assert every["last_rank"] == 1 and every["last_pct"] > 90
    assert ranks.loc[0, "wait_pct"] > 80 > 1 > ranks.loc[1, "wait_pct"]
    assert (ranks["kernel_ns"] - ranks["transfer_ns"] - ranks["wait_ns"]).abs().max() < 1
    res = CliRunner().invoke(main, ["trace", "nccl", *map(str, paths), "--format", "csv"])
    assert res.exit_code == 0, res.output
    from io import StringIO

    bw = pd.read_csv(StringIO(res.stdout))
    sized = bw[(bw["scope"] == "all") & bw["busbw_gbps"].notna()]
    assert len(sized) and (sized["fastest_rank"] == 1).all()
