"""The developer docs count what the code holds: docs/developer/extending.md lists, for each kind
of extension, the files of hpcprof/ that name today's built-in ones, and docs/developer/architecture.md
says how many modules import hpcprof.core.catalog. Each list and number is computed here from the imports
(tests/test_layers.py's, lazy ones included) and the `"module:function"` strings, so that a change that
spreads a kind over more files fails until the doc says so."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from test_layers import ROOT, imports, module_name

#: the checkout (the docs and site configs are not installed with the package that ROOT is)
REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "developer"
#: a line of extending.md's count: `- LABEL (`OWN`, ...), N files: `FILE`, ...` (paths under hpcprof/)
COUNT_LINE = re.compile(r"^\s*- (?P<label>[^(]+?) \((?P<own>[^)]*)\), (?P<n>\d+) files?: (?P<files>.*)$")
TICKED = re.compile(r"`([^`]+)`")
GLUE = re.compile(r"(hpcprof(?:\.\w+)+)(?::\w+)?")


def module_of(path: str) -> str:
    """The dotted module or package of a path under hpcprof/ (`tools/nsys/analysis/` -> hpcprof.tools.nsys.analysis)."""
    return ".".join(["hpcprof", *path.strip("/").removesuffix(".py").split("/")])


def glue(path: Path) -> set[str]:
    """The modules a file names in a string that is a whole module name or `"module:attribute"`
    (what hpcprof.core.lazy and the command table import later, unseen by an import statement)."""
    return {match[1] for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and (match := GLUE.fullmatch(node.value))}


@functools.cache
def named_by_file() -> dict[str, tuple[str, set[str]]]:
    """Each file of hpcprof/ (its path under hpcprof/): its module, and the modules it imports or names."""
    return {path.relative_to(ROOT).as_posix(): (module_name(path), imports(path) | glue(path))
            for path in ROOT.rglob("*.py")}


def naming(own: list[str]) -> set[str]:
    """The files of hpcprof/ outside the modules `own` that import one of them or name it in a glue string."""
    def inside(module: str) -> bool:
        return any(module == o or module.startswith(o + ".") for o in own)
    return {path for path, (module, names) in named_by_file().items()
            if not inside(module) and any(inside(m) for m in names)}


def count_lines() -> list[tuple[str, list[str], int, list[str]]]:
    """extending.md's count lines: label, its own modules, the number stated, the files listed."""
    found = []
    for line in (DOCS / "extending.md").read_text().splitlines():
        if match := COUNT_LINE.match(line):
            own = [module_of(p) for p in TICKED.findall(match["own"])]
            found.append((match["label"], own, int(match["n"]), TICKED.findall(match["files"])))
    return found


def test_extending_lists_the_files_each_kind_touches() -> None:
    lines = count_lines()
    assert {label for label, *_ in lines} >= {"nsys", "torch", "ncu", "a scheduler", "a workload"}
    for label, own, stated, listed in lines:
        assert stated == len(listed), f"extending.md: {label} says {stated} files and lists {len(listed)}"
        actual = sorted(naming(own))
        assert sorted(listed) == actual, f"extending.md's line for {label}: the files today are {actual}"


def test_the_count_finds_imports_and_glue_strings() -> None:
    """The rule finds an import, a `from` import of a module and a "module:function" string, never the module itself."""
    assert "collect/files.py" in naming(["hpcprof.core.catalog"])       # `from hpcprof.core import catalog as c`
    assert "profilers/__init__.py" in naming(["hpcprof.tools.ncu.profiler"])    # `from hpcprof.profilers import ncu`
    assert "tools/ncu/profiler.py" not in naming(["hpcprof.tools.ncu.profiler"])     # its own module
    assert "cli/__init__.py" in naming(["hpcprof.tools.ncu.analysis"])     # its COMMANDS table names hpcprof.tools.ncu.analysis.cli


def test_architecture_counts_the_catalog_importers() -> None:
    text = (DOCS / "architecture.md").read_text()
    match = re.search(r"(\d+) modules of `hpcprof/` import it", text)
    assert match, "architecture.md: say how many modules of `hpcprof/` import it (the catalog)"
    importers = naming(["hpcprof.core.catalog"])
    assert int(match[1]) == len(importers), f"architecture.md: {len(importers)} modules import hpcprof.core.catalog"
    assert imports(ROOT / "core" / "catalog.py") == set()     # the catalog imports nothing of hpcprof: any room may read it


def test_metrics_are_declared_in_the_catalog_only() -> None:
    """extending.md's metric: declared in catalog.py, its value made where a metric's `value` is called."""
    text = (DOCS / "extending.md").read_text()
    match = re.search(r"its value is made by (\d+) modules?: (.*)$", text, re.M)
    assert match, "extending.md: say which modules make a metric's value"
    declares = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py") if "MetricSpec(" in p.read_text()}
    assert declares == {"core/catalog.py"}
    makes = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py")
                   if re.search(r"\b[A-Z][A-Z0-9_]+\.value\(", p.read_text()))
    assert (int(match[1]), sorted(TICKED.findall(match[2]))) == (len(makes), makes)


def test_a_site_is_its_file_only() -> None:
    """No module of hpcprof/ names a shipped site's file: a new site is one YAML file in site_configs/."""
    sites = [p.name for p in (REPO / "site_configs").glob("*.yaml")]
    assert sites
    assert [p for p in ROOT.rglob("*.py") if any(site in p.read_text() for site in sites)] == []
