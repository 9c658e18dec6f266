"""The `data` group of benchmarks/reliability.py in CI: forged forensics records and steps files
on a real local run, each refused or left out with one line by `status`, `logs --hang` and
`collect`: nothing accepted in silence, no traceback, nothing blocked, lost or left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability_util import every_case_handled


@pytest.mark.slow     # a real run copied for most of 58 cases (the developer tier leaves them to the full suite)
def test_every_data_case_is_handled(repo: Path, fixtures_dir: Path) -> None:
    every_case_handled(repo, fixtures_dir, "data", 58, 900)
