"""The `faults` group of benchmarks/reliability.py in CI: every case handled, nothing
lost, no traceback, nothing accepted in silence, nothing blocked, nothing left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability_util import every_case_handled

pytestmark = pytest.mark.slow


def test_every_fault_case_is_handled(repo: Path, fixtures_dir: Path) -> None:
    every_case_handled(repo, fixtures_dir, "faults", at_least=55, timeout=600)
