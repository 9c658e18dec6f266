"""Shared test fixtures: where the real profiler fixtures and the repository live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixture_files import materialize

#: The service fixtures (each skips with its reason where the service cannot be started):
#: slurm_cluster and torque_cluster, openpbs, postgres_server; window_campaign (a collected workdir
#: several files read); and user_dirs: the session's own home and each test's own XDG directories,
#: and the guard on the real user's.
pytest_plugins = ["user_dirs", "slurm_cluster", "pbs_server", "postgres_server", "window_campaign"]

REPO = Path(__file__).resolve().parents[1]
FIXTURES_OVERRIDE = os.environ.get("HPCPROF_FIXTURES")  # an unpacked tree to use instead
IN_CI = os.environ.get("CI") == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    """In CI (CI=true) nothing may be skipped: a skip is reported as a failure."""
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run everything: {report.longrepr}"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's fixtures (tests/fixtures), unpacked once per session."""
    if FIXTURES_OVERRIDE:
        return Path(FIXTURES_OVERRIDE)
    return materialize(tmp_path_factory.mktemp("fixtures"))


@pytest.fixture(scope="session")
def gpu_data(fixtures_dir: Path) -> Path:
    """The H200 runs of benchmarks/gpu the report, compare and nsys tests read (tests/fixtures/gpu:
    a copy of benchmarks/gpu/data's run1/run2 seqpar.json, run1's ncu CSV, run3's nsys, torch, ddp)."""
    return fixtures_dir / "gpu"


COUNT_PROPERTY = "differential count"
#: the lines recorded by record_counts, gathered from the test reports (of every xdist worker)
COUNT_LINES: list[str] = []
#: fixtures of shared services -> the server each reaches: the tests of one server run in one worker,
#: one at a time (a test asserting on Slurm's whole queue, say, must not see another test's jobs)
SERVICE_FIXTURES = {"slurm_cluster": "slurm", "torque_cluster": "slurm", "cluster": "slurm-cluster",
                    "openpbs": "openpbs", "postgres_server": "postgres"}
#: session fixtures that several test files only read -> the xdist group of the tests using one, so
#: that one worker makes it once (the tests of a service keep the service's group)
SHARED_FIXTURES = {"window_campaign": "window-campaign"}
#: the groups measured longest (benchmarks/results/test_durations.txt), started first so that none of
#: them is left to run alone at the end; the others follow in collection order (tests/run.sh passes
#: --no-loadscope-reorder: xdist would otherwise start the groups with the most tests first)
START_FIRST = ("slurm", "slurm-cluster", "test_differential_nsys.py", "test_forensics.py", "test_nsys_rules.py",
               "test_reliability_hostile.py", "test_report_html.py", "window-campaign", "test_trace_differential.py",
               "test_docs.py", "test_reliability_silent.py", "test_steps.py", "test_differential_nsys_extra.py", "openpbs")
#: every collected test file (before -m deselects any): whether it has a test not marked slow
FAST_FILES = pytest.StashKey[dict[Path, bool]]()


def services_of(item: pytest.Item) -> set[str]:
    """The shared servers a test uses: those of its SERVICE_FIXTURES, else the one-node Slurm for a
    slurm/torque mark (the two-node cluster's tests carry the mark too, and its fixture)."""
    services = {SERVICE_FIXTURES[name] for name in getattr(item, "fixturenames", ()) if name in SERVICE_FIXTURES}
    if not services and (item.get_closest_marker("slurm") or item.get_closest_marker("torque")):
        services.add("slurm")
    return services


def service_groups(items: list[pytest.Item]) -> dict[str, str]:
    """Each server's group: servers that one test uses together share a group (merged transitively)."""
    group = {service: service for item in items for service in services_of(item)}
    for item in items:
        joined = sorted({group[service] for service in services_of(item)})
        for name in joined[1:]:
            group = {service: joined[0] if g == name else g for service, g in group.items()}
    return group


@pytest.hookimpl(tryfirst=True)        # before pytest-xdist's own hook reads the groups, and -m the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests for pytest-xdist's --dist loadgroup: the tests of a shared service in one
    worker per server (the one-node Slurm with its Torque wrappers, the two-node Slurm, OpenPBS,
    PostgreSQL: separate daemons, state and queues), so two tests never share a scheduler or server at
    once; every other test in its file's group (its module fixtures run once). The groups of
    START_FIRST run first. (pytest-xdist 3.8 groups by rewriting a test's node id, which pytest 9 no
    longer reads: pytest < 9.) A test that uses a shared service is `slow` (the fast tier, tests/run.sh
    --fast, starts none)."""
    groups = service_groups(items)
    fast_files = config.stash.setdefault(FAST_FILES, {})
    group_of: dict[str, str] = {}
    for item in items:
        services = services_of(item)
        shared = sorted(SHARED_FIXTURES[name] for name in getattr(item, "fixturenames", ()) if name in SHARED_FIXTURES)
        group = group_of[item.nodeid] = groups[min(services)] if services else shared[0] if shared else item.path.name
        item.add_marker(pytest.mark.xdist_group(group))
        if services:
            item.add_marker(pytest.mark.slow)
        fast_files[item.path] = fast_files.get(item.path, False) or not item.get_closest_marker("slow")
    first = {group: rank for rank, group in enumerate(START_FIRST)}
    items.sort(key=lambda item: first.get(group_of[item.nodeid], len(first)))


@pytest.fixture
def record_counts(request: pytest.FixtureRequest):
    """`record_counts(line)`: a line printed in the terminal summary (differential-test counts)."""
    return lambda line: request.node.user_properties.append((COUNT_PROPERTY, line))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        COUNT_LINES.extend(line for key, line in report.user_properties if key == COUNT_PROPERTY)


def pytest_terminal_summary(terminalreporter: object, config: pytest.Config) -> None:
    lines = COUNT_LINES
    if lines:
        terminalreporter.section("differential counts")  # type: ignore[attr-defined]
        for line in lines:
            terminalreporter.write_line(line)  # type: ignore[attr-defined]
