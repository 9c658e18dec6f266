"""The start-up hook is invisible (benchmarks/reliability_hook.py, class 9 of the reliability
suite): each hostile program behaves byte for byte as it does without hpcprof (stdout, stderr, exit
code, the files it writes), the hook stepping aside with at most one line where it cannot work;
an experiment or site `env` that sets the hook's own variables is refused at render."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import reliability_hook  # noqa: E402  (benchmarks/ is no package)
from reliability import HANDLED  # noqa: E402

PROGRAMS = {program.label: program for program in reliability_hook.PROGRAMS}


#: the programs that import torch run it twice (plain, hooked): the full suite's, not the developer tier's
CASES = [pytest.param(label, marks=pytest.mark.slow) if "import torch" in program.code else label
         for label, program in PROGRAMS.items()]


@pytest.mark.parametrize("label", CASES)
def test_a_hostile_program_behaves_as_without_hpcprof(tmp_path: Path, label: str) -> None:
    assert reliability_hook.compare(PROGRAMS[label], tmp_path) == HANDLED


@pytest.mark.parametrize("where", list(reliability_hook.RESERVED))
def test_an_experiment_env_setting_the_hooks_variables_is_refused(tmp_path: Path, where: str) -> None:
    assert reliability_hook.render_refused(tmp_path, reliability_hook.RESERVED[where])() == HANDLED


def test_a_site_env_setting_the_hooks_variables_is_refused(tmp_path: Path) -> None:
    assert reliability_hook.site_refused(tmp_path)() == HANDLED
