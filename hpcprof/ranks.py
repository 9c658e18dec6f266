"""The one rule for a rank written in a file name, used by `collect` and every analysis command.

`rank<N>`, `rank_<N>` or `rank-<N>`, any case, anywhere in the name (not the directories):
`rank3.nsys-rep`, `report_rank_3.sqlite`, `ncu_Rank-12.csv` and `rank0.1234.pt.trace.json` give
3, 3, 12 and 0; the first such mention counts. The rank wrapper names its files `rank<N>.*`.
"""

from __future__ import annotations

import re
from pathlib import PurePath

RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_from_filename(path: PurePath | str) -> int | None:
    """The rank in a file's name (`rank_3.sqlite` -> 3), or None when the name has none."""
    match = RANK_IN_NAME.search(PurePath(path).name)
    return int(match.group(1)) if match else None
