"""hpcprof's rooms import one way: a module imports only its own room and the rooms below it.

The rule (LAYERS, bottom first) and the edges still allowed against it (TEMPORARY) are written
once, here. Every `import`/`from ... import` of hpcprof/ counts, at module level or inside a
function (a lazy import is still a dependency). Decided from the code, each room a folder of
hpcprof/: the base every room uses (core); a run directory read back (run: its layout, record,
result tables and the rank of a per-rank file), on the base alone; the profiler table
(hpcprof.profilers: each tool's options, launch and the names of its collector and result tables)
sits on them with the built-in tools' declarations (hpcprof.tools: each tool's package and its
`profiler` module), so that every room above looks tools up there; workloads run on compute nodes
and import only the base; config validates workload arguments; the options the commands share
(cli.options) sit on config, below the tools' commands that use them; schedulers (pbs reads a
RunDir) and render (a scheduler renders its directives and the Kubernetes manifest) sit above; the
campaign submits rendered runs, decides their state and records them in the store; analyses read
profiles (forensics reads a run's state); collect runs the analyses and fills the store; report
reads what collect wrote; the command line (cli) and the Python API (api) are at the top. A tool's
result tables (hpcprof.tools.<tool>.tables) sit with its declaration; its analyses and headline
metrics (hpcprof.tools.<tool>.analysis) with hpcprof's own; its report figures
(hpcprof.tools.<tool>.report) with the report; the re-implementation of NVIDIA's `nsys
stats`/`nsys analyze` (tools.nsys.stats) sits below them (they build on it); torch's part of the
Python API sits with the API.

Every module has a room, named here: a package (a directory) by its name or by an enclosing
package's; only __init__ and __main__ stand directly in hpcprof/ (test_no_module_loose_at_the_root).
A new package of hpcprof/ (as the profiler table's hpcprof/profilers/ was) fails
test_every_module_has_a_named_room until it is given its room here: its own level, above every room
it imports and below every room that imports it.
No module cycle and no package cycle, lazy imports (inside functions) included.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

import hpcprof

#: rooms, bottom first; a room is a module or package prefix (the longest prefix names a module's room)
LAYERS: list[list[str]] = [
    ["hpcprof", "hpcprof.core", "hpcprof._templates", "hpcprof._site_configs", "hpcprof.inject"],
    ["hpcprof.run"],
    ["hpcprof.profilers", "hpcprof.tools", "hpcprof.tools.nsys.tables", "hpcprof.tools.torch.tables",
     "hpcprof.tools.ncu.tables"],
    ["hpcprof.workloads"],
    ["hpcprof.config"],
    ["hpcprof.cli.options"],
    ["hpcprof.schedulers"],
    ["hpcprof.render"],
    ["hpcprof.campaign"],
    ["hpcprof.tools.nsys.stats"],
    ["hpcprof.analysis", "hpcprof.tools.nsys.analysis", "hpcprof.tools.torch.analysis", "hpcprof.tools.ncu.analysis"],
    ["hpcprof.collect"],
    ["hpcprof.report", "hpcprof.tools.nsys.report", "hpcprof.tools.torch.report", "hpcprof.tools.ncu.report"],
    ["hpcprof.cli", "hpcprof.api", "hpcprof.tools.torch.analysis.api", "hpcprof.__main__"],
]

#: (importing room, imported room): upward edges that other branches remove; the lead deletes
#: each line when its branch is merged. Nothing else may be added here.
TEMPORARY: dict[tuple[str, str], str] = {
}

ROOT = Path(hpcprof.__file__).parent
#: the data packages setup.cfg installs into hpcprof/ (from templates/ and site_configs/: only an
#: installed hpcprof has them)
DATA_PACKAGES = {"hpcprof._templates", "hpcprof._site_configs"}
LEVEL = {room: level for level, rooms in enumerate(LAYERS) for room in rooms}


def room_of(module: str) -> str:
    """The room of a dotted module name: its longest prefix listed in LAYERS (`hpcprof` names
    hpcprof/__init__.py alone: a module or package new to hpcprof/ is in no room until named)."""
    parts = module.split(".")
    for n in range(len(parts), 1, -1):
        if ".".join(parts[:n]) in LEVEL:
            return ".".join(parts[:n])
    if module in LEVEL:
        return module
    raise AssertionError(f"{module} is in no room of LAYERS: give it one (a new package: its own level, above "
                         "the rooms it imports and below those that import it)")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The hpcprof modules `path` imports (for `from M import x`: M.x when that is a module, else M)."""
    found = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "hpcprof"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != "hpcprof":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                is_module = (ROOT.parent / sub.replace(".", "/")).with_suffix(".py").exists() \
                    or (ROOT.parent / sub.replace(".", "/") / "__init__.py").exists()
                found.add(sub if is_module else base)
    return found


def edges() -> list[tuple[str, str]]:
    return sorted({(module_name(p), target) for p in ROOT.rglob("*.py") for target in imports(p)})


def test_no_upward_import() -> None:
    upward = []
    for source, target in edges():
        a, b = room_of(source), room_of(target)
        if LEVEL[b] > LEVEL[a] and (a, b) not in TEMPORARY:
            upward.append(f"{source} -> {target} ({a} is below {b})")
    assert upward == []


def test_every_temporary_exception_is_still_needed() -> None:
    """An exception whose edge is gone is deleted, so the list never grows stale."""
    used = {(room_of(s), room_of(t)) for s, t in edges()}
    assert [edge for edge in TEMPORARY if edge not in used] == []


def command_modules() -> set[str]:
    """The modules that define a sub-command (hpcprof.cli.COMMANDS) and the CLI itself."""
    from hpcprof.cli import COMMANDS

    return {target.partition(":")[0] for target in COMMANDS.values()} | {"hpcprof.cli"}


def command_edges(found: list[tuple[str, str]], commands: set[str]) -> list[str]:
    """Edges into a command module from any other module (only `python -m hpcprof` starts the CLI)."""
    return [f"{source} -> {target}" for source, target in found
            if target in commands and source != target and (source, target) != ("hpcprof.__main__", "hpcprof.cli")]


def test_no_module_imports_a_command_module() -> None:
    """A command is a leaf: what two commands share lives in cli.options, cli.common or a lower
    room (`render`'s submit imported `doctor` for its profiler check; it is in render.profilers now)."""
    assert command_edges(edges(), command_modules()) == []


def test_the_command_rule_catches_a_command_importing_another() -> None:
    commands = command_modules()
    assert {"hpcprof.cli.doctor", "hpcprof.cli.render_submit", "hpcprof.cli.report"} <= commands
    assert command_edges([("hpcprof.cli.render_submit", "hpcprof.cli.doctor"),
                          ("hpcprof.cli.status", "hpcprof.cli.common")], commands) == [
        "hpcprof.cli.render_submit -> hpcprof.cli.doctor"]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of `graph` with more than one node (Tarjan's), each sorted:
    the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def graph_of(found: list[tuple[str, str]], unit: Callable[[str], str] = lambda module: module) -> dict[str, set[str]]:
    """The import graph between the `unit`s of the modules of `found` (self-edges left out)."""
    graph: dict[str, set[str]] = {}
    for source, target in found:
        if unit(source) != unit(target):
            graph.setdefault(unit(source), set()).add(unit(target))
    return graph


def package_of(module: str) -> str:
    """A module's package (a package's: itself); a module directly in hpcprof/ is a unit of its own."""
    is_package = (ROOT.parent / module.replace(".", "/") / "__init__.py").exists()
    package = module if is_package else module.rpartition(".")[0]
    return module if package == "hpcprof" else package


def test_no_module_cycle() -> None:
    """No two modules import each other, directly or through others (a package's __init__ and its
    own modules included; nsys/echo <-> nsys/echo_match was one)."""
    assert cycles(graph_of(edges())) == []


def test_no_package_cycle() -> None:
    """No two packages import each other, directly or through others (config <->
    schedulers and analysis <-> collect were two)."""
    assert cycles(graph_of(edges(), package_of)) == []


def test_the_cycle_rules_catch_a_cycle() -> None:
    """The checkers themselves, on two cycles the code once had."""
    module_cycle = [("hpcprof.tools.nsys.analysis.echo", "hpcprof.tools.nsys.analysis.echo_match"),
                    ("hpcprof.tools.nsys.analysis.echo_match", "hpcprof.tools.nsys.analysis.echo"),
                    ("hpcprof.tools.nsys.analysis.echo", "hpcprof.core.errors")]
    assert cycles(graph_of(module_cycle)) == [["hpcprof.tools.nsys.analysis.echo", "hpcprof.tools.nsys.analysis.echo_match"]]
    package_cycle = [("hpcprof.config.site", "hpcprof.schedulers.registry"),
                     ("hpcprof.schedulers.slurm", "hpcprof.render.job"), ("hpcprof.render.job", "hpcprof.config.site"),
                     ("hpcprof.schedulers.slurm", "hpcprof.core.errors")]
    assert cycles(graph_of(package_cycle, package_of)) == [["hpcprof.config", "hpcprof.render", "hpcprof.schedulers"]]
    assert cycles(graph_of(package_cycle)) == []    # no module cycle among those modules


def test_no_module_loose_at_the_root() -> None:
    """The folders are the rooms: a new module goes into the folder of its floor (core, run, ...),
    not beside hpcprof/__init__.py and the program's entry (__main__.py)."""
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["__init__.py", "__main__.py"]


def test_every_command_module_is_in_cli_or_its_tool() -> None:
    """The command line's modules are in hpcprof/cli/, but a tool's commands, which its own package
    holds (hpcprof/tools/<tool>/)."""
    from hpcprof.cli import COMMANDS

    elsewhere = sorted(target for target in COMMANDS.values()
                       if not target.startswith("hpcprof.cli.")
                       and not any(target.startswith(f"hpcprof.tools.{path.name}.")
                                   for path in (ROOT / "tools").iterdir() if path.is_dir()))
    assert elsewhere == []
    assert {t.partition(":")[0] for t in COMMANDS.values()} >= {"hpcprof.cli.render_submit", "hpcprof.cli.doctor",
                                                                "hpcprof.tools.nsys.analysis.cli"}


def test_every_module_has_a_named_room() -> None:
    """Every module and package of hpcprof/ is in a room LAYERS names (room_of fails on one that is
    not); a package new to hpcprof/ is in none until named."""
    assert {room_of(module_name(path)) for path in ROOT.rglob("*.py")} | DATA_PACKAGES == set(LEVEL)
    for new in ("hpcprof.newpackage", "hpcprof.newpackage.tool", "hpcprof.newmodule"):
        with pytest.raises(AssertionError, match="is in no room of LAYERS"):
            room_of(new)


def test_the_rule_catches_an_upward_edge() -> None:
    """The checker itself: an analysis importing the collect orchestration is upward, one using
    collect's engine is not, and every module of hpcprof/ has a room."""
    assert LEVEL[room_of("hpcprof.collect.runs")] > LEVEL[room_of("hpcprof.tools.nsys.analysis.cli")]
    assert LEVEL[room_of("hpcprof.core.pool")] < LEVEL[room_of("hpcprof.tools.nsys.analysis.cli")]
    assert room_of("hpcprof.tools.nsys.analysis.echo") == "hpcprof.tools.nsys.analysis"
    assert LEVEL[room_of("hpcprof.tools.nsys.stats.db")] < LEVEL[room_of("hpcprof.tools.nsys.analysis.echo")]
