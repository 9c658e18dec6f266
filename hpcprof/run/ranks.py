"""Ranks: the one rule for a rank written in a file name, used by `collect` and every analysis
command; and which ranks a profiler wraps (RankSelection, checked by the experiment's config and
used by collect to tell which ranks should have left a profile). The check of a set of rank files
against its world is hpcprof.run.rank_sets'.

`rank<N>`, `rank_<N>` or `rank-<N>`, any case, anywhere in the name (not the directories):
`rank3.nsys-rep`, `report_rank_3.sqlite`, `ncu_Rank-12.csv` and `rank0.1234.pt.trace.json` give
3, 3, 12 and 0; the first such mention counts. The rank wrapper names its files `rank<N>.*`.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import PurePath

#: the rule, as a regular expression searched in any case
RANK_IN_NAME = r"rank[-_]?(\d+)"


def rank_from_filename(path: PurePath | str) -> int | None:
    """The rank in a file's name (`rank_3.sqlite` -> 3), or None when the name has none."""
    match = re.search(RANK_IN_NAME, os.path.basename(os.fspath(path)), re.IGNORECASE)
    return int(match.group(1)) if match else None


class RankSelection:
    """Which ranks a profiler wraps: all | 0,3,5 | local:K | first-nodes:N | every:N, combined
    with `+` (all must hold), e.g. `local:0+first-nodes:2` = local rank 0 on the first 2 nodes."""

    POLICIES = ("all", "<r>,<r>,...", "local:K", "first-nodes:N", "every:N")

    def __init__(self, spec: str | int | list[int]) -> None:
        self.spec = spec
        self.ranks: list[int] | None = None
        self.local: int | None = None
        self.first_nodes: int | None = None
        self.every: int | None = None
        if isinstance(spec, bool):
            raise ValueError(self._bad(spec))
        if isinstance(spec, int):
            spec = [spec]
        if isinstance(spec, list):
            if not spec or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 1 << 24 for r in spec):
                raise ValueError(self._bad(spec))
            self.ranks = sorted(set(spec))
            return
        if spec == "all":
            return
        import re

        if not isinstance(spec, str) or re.search(r"\s", spec):
            raise ValueError(self._bad(spec) + "; no spaces")
        seen: set[str] = set()
        for part in str(spec).split("+"):
            key, _, value = part.partition(":")
            kind = key if value else "list"
            if kind in seen:
                raise ValueError(f"rank selection {spec!r} names {kind} twice; combine different "
                                 "policies with '+', e.g. local:0+first-nodes:2")
            seen.add(kind)
            if key in ("local", "first-nodes", "every") and re.fullmatch(r"[0-9]{1,8}", value):
                number = int(value)
                if key == "local":
                    self.local = number
                elif number < 1:
                    raise ValueError(f"{key}:{value} must be at least 1")
                elif key == "first-nodes":
                    self.first_nodes = number
                else:
                    self.every = number
            elif re.fullmatch(r"[0-9]{1,8}(,[0-9]{1,8})*", part):
                self.ranks = sorted({int(r) for r in part.split(",")})
            else:
                raise ValueError(self._bad(spec))

    @staticmethod
    def _bad(spec: object) -> str:
        return (f"unknown rank selection {spec!r}; use all, a list of ranks, local:K, first-nodes:N "
                "or every:N, combined with '+' (e.g. local:0+first-nodes:2)")

    def selects(self, rank: int, local_rank: int, ranks_per_node: int) -> bool:
        """Whether global `rank` (with `local_rank`) is profiled: the same rule as the wrapper."""
        return ((self.ranks is None or rank in self.ranks)
                and (self.local is None or local_rank == self.local)
                and (self.first_nodes is None or rank < self.first_nodes * ranks_per_node)
                and (self.every is None or rank % self.every == 0))

    def bash_condition(self, ranks_per_node: int) -> str:
        """A bash test on $hp_rank/$hp_local_rank (integers only: nothing user-written)."""
        tests = []
        if self.ranks is not None:
            listed = " ".join(map(str, self.ranks))
            tests.append(f"case \" {listed} \" in *\" $hp_rank \"*) true ;; *) false ;; esac")
        if self.local is not None:
            tests.append(f"[ \"$hp_local_rank\" -eq {self.local} ]")
        if self.first_nodes is not None:
            tests.append(f"[ \"$hp_rank\" -lt {self.first_nodes * ranks_per_node} ]")
        if self.every is not None:
            tests.append(f"[ $((hp_rank % {self.every})) -eq 0 ]")
        return " && ".join(f"{{ {t}; }}" for t in tests) or "true"

    def __str__(self) -> str:
        return str(self.spec)


#: a rank number in a file name: ASCII digits, no leading zero
_RANK_NUMBER = re.compile(r"0|[1-9][0-9]{0,8}")


def rank_in_name(name: str, prefix: str, suffix: str = "") -> int | None:
    """The rank of `<prefix><N><suffix>` with N in ASCII digits and no leading zero, else None."""
    if not (name.startswith(prefix) and name.endswith(suffix)) or len(name) < len(prefix) + len(suffix):
        return None
    middle = name[len(prefix):len(name) - len(suffix)]
    return int(middle) if _RANK_NUMBER.fullmatch(middle) else None
