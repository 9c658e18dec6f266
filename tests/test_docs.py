"""The docs run: every fenced block of README.md and docs/**/*.md is executed or validated, and the
generated reference (docs/generate.py) equals the committed one.

Blocks by language:
- ```yaml: read with hpcprof's YAML loader and validated with its own models: an experiment (it has
  `workload:`; expanded against the local site, so the workload's args are checked too), a site
  config (it has `scheduler:`), or a part of one (every key an experiment's, else a site's);
- ```bash: run as one bash script (`set -eo pipefail`);
- ```console: its `$ ` lines (with their `\\` continuations) run as one bash script; the other
  lines are the output they printed, not compared (run ids and timings differ);
  as in one terminal, the variables an earlier bash or console block of the file set (its
  `NAME=...` lines) are set again before a block runs;
- ```python: run with this checkout's hpcprof;
- ```sql: run against the store of the shared workdir; it must return rows;
- ```toml: parsed (tomllib); an entry point of hpcprof's groups must name `module:attribute`;
- ```text: output or plain text, shown only.

Everything runs in a sandbox: one workdir for all docs (`hpcprof-runs`, holding a collected 2-point
sweep of examples/seqpar_cpu.yaml on the local site, the README tour's, before any other docs file
runs but those on Slurm, whose blocks make their own runs), a directory per docs file to run in
(with the repository's folders and `hpcprof-runs` linked into it, as in a clone), HOME and XDG_* in
the sandbox, and `hpcprof` on PATH running this checkout. An HTML comment on the line above a block
steers it: `<!-- docs-test: not run: REASON -->` skips it (a reason is required),
`<!-- docs-test: file NAME -->` writes it to NAME in the file's directory (for later blocks) instead
of running it, `<!-- docs-test: on slurm-local -->` runs the file on the real one-node Slurm
(tests/slurm_cluster.py; its jobs go to the sandbox's workdir), and
`<!-- docs-test: run by .ci/run -->` marks a block whose every command CI's script runs as it is
written (the README's two commands: the tests, then the quickstart).
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
RUN = ("yaml", "bash", "console", "python", "sql", "toml")
SHOWN = ("text",)
DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(?P<body>.*?)\s*-->")
FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")
TIMEOUT_S = 300
ON_SLURM = "on slurm-local"
BY_CI = "run by .ci/run"
CI_SCRIPT = REPO / ".ci" / "run"


class Block(NamedTuple):
    """One fenced block: where it is, its language, its text and the docs-test directive above it."""

    path: Path
    line: int
    lang: str
    text: str
    directive: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, in order."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j] == "```"), None)
        assert end is not None, f"{path.relative_to(REPO)}:{i + 1}: a fenced block that is never closed"
        above = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        directive = DIRECTIVE.fullmatch(above)
        found.append(Block(path, i + 1, match["lang"], "\n".join(lines[i + 1:end]) + "\n",
                           directive["body"] if directive else None))
        i = end + 1
    return found


def skip_reason(block: Block) -> str | None:
    """The reason a block is not run (`not run: REASON`), None when it runs."""
    if block.directive is None or not block.directive.startswith("not run"):
        return None
    return block.directive.removeprefix("not run").lstrip(":").strip()


def counts() -> dict[str, int]:
    """How many blocks the docs have, run, show only and skip (printed by `python tests/test_docs.py`)."""
    every = [b for path in DOCS for b in blocks(path)]
    skipped = [b for b in every if skip_reason(b) is not None]
    shown = [b for b in every if b.lang in SHOWN]
    return {"blocks": len(every), "run": len(every) - len(skipped) - len(shown), "shown": len(shown),
            "not run": len(skipped)}


# -- the checks of the docs' form ----------------------------------------------------------------

def test_reference_is_generated() -> None:
    """docs/reference/*.md equal what docs/generate.py makes from the code's declarations."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_generate", REPO / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    pages = generate.generate()
    assert {p.name for p in pages} == {p.name for p in (REPO / "docs" / "reference").glob("*.md")}, \
        "docs/reference holds a page docs/generate.py does not make (or misses one): run python docs/generate.py"
    assert generate.stale(pages) == [], "docs/reference is out of date: run python docs/generate.py"


def test_every_block_is_known() -> None:
    """Every fence is at the margin and names a language the docs test knows; every directive is one
    it knows, sits above a block, and every skip says why."""
    problems = []
    for path in DOCS:
        text = path.read_text()
        rel = path.relative_to(REPO)
        for n, line in enumerate(text.splitlines(), 1):
            if re.match(r"^\s+```", line):
                problems.append(f"{rel}:{n}: an indented fence (the docs test reads fences at the margin only)")
        found = blocks(path)
        for block in found:
            if block.lang not in RUN + SHOWN:
                problems.append(f"{block.where}: fence language {block.lang!r}; use one of {', '.join(RUN + SHOWN)}")
            if block.directive is not None and not (block.directive.startswith("not run")
                                                    or block.directive in (ON_SLURM, BY_CI)
                                                    or re.fullmatch(r"file [\w.\-/]+", block.directive)):
                problems.append(f"{block.where}: unknown directive {block.directive!r}")
            if skip_reason(block) == "":
                problems.append(f"{block.where}: a `not run` marker without a reason")
        steered = sum(1 for b in found if b.directive is not None)
        if steered != sum(1 for line in text.splitlines() if DIRECTIVE.fullmatch(line.strip())):
            problems.append(f"{rel}: a docs-test directive that is not on the line above a block")
    assert not problems, "\n".join(problems)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.DOTALL | re.MULTILINE)
    return {re.sub(r"[^a-z0-9 _-]", "", m.lower()).replace(" ", "-") for m in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}


def test_links_resolve() -> None:
    """Every relative link of the docs (and of benchmarks/results/HISTORY.md) names a file that
    exists and, with `#anchor`, a heading it has."""
    problems = []
    for path in [*DOCS, REPO / "benchmarks" / "results" / "HISTORY.md"]:
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.DOTALL | re.MULTILINE)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            where = (path.parent / file).resolve() if file else path
            if not where.exists():
                problems.append(f"{path.relative_to(REPO)}: link to {target}: no such file")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                problems.append(f"{path.relative_to(REPO)}: link to {target}: no such heading")
    assert not problems, "\n".join(problems)


def commands(text: str) -> list[str]:
    """A shell block's command lines: comments dropped, continuations joined, spaces squeezed."""
    joined = text.replace("\\\n", " ")
    return [" ".join(line.split("#", 1)[0].split()) for line in joined.splitlines()
            if line.split("#", 1)[0].strip()]


def test_blocks_run_by_ci_are_what_ci_runs() -> None:
    """A block marked `run by .ci/run` holds only commands .ci/run runs, as written."""
    ci = commands(CI_SCRIPT.read_text())
    marked = [b for path in DOCS for b in blocks(path) if b.directive == BY_CI]
    assert marked, "no block is marked `run by .ci/run` (the README's two commands are)"
    for block in marked:
        missing = [line for line in commands(block.text) if line not in ci]
        assert not missing, f"{block.where}: {missing} not run by .ci/run ({ci})"


def test_skips_are_rare() -> None:
    """Blocks that cannot run here stay the exception."""
    numbers = counts()
    assert numbers["not run"] * 10 <= numbers["blocks"], numbers


# -- running them --------------------------------------------------------------------------------

class Sandbox(NamedTuple):
    root: Path
    env: dict[str, str]


def run(argv: list[str], cwd: Path, env: dict[str, str], what: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{what} exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n" \
                                 f"--- stderr\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    """The docs' world: a shared workdir, a private HOME and XDG_* dirs, and `hpcprof` (this
    checkout) first on PATH."""
    root = tmp_path_factory.mktemp("docs")
    home, bin_dir = root / "home", root / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "hpcprof"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m hpcprof "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCPROF_", "XDG_"))}
    env.update({
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(REPO), "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local" / "state"), "XDG_CACHE_HOME": str(home / ".cache"),
        "HPCPROF_WORKDIR": str(root / "hpcprof-runs")})
    return Sandbox(root, env)


def seed(box: Sandbox) -> None:
    """The collected 2-point sweep the docs read (the README tour's), made unless the README's
    own blocks already made one."""
    if any((box.root / "hpcprof-runs").glob("seqpar-cpu/*-p001/results/headline.json")):
        return
    cwd = workspace(box.root, "seed")
    run(["hpcprof", "submit", "examples/seqpar_cpu.yaml", "--site", "local", "--wait",
         "--set", "sweep={workload.args.hidden_dim: [256, 512]}"], cwd, box.env, "seed submit")
    run(["hpcprof", "collect"], cwd, box.env, "seed collect")


def workspace(root: Path, name: str) -> Path:
    """A directory to run one docs file's blocks in, as if in a clone of the repository."""
    cwd = root / "cwd" / name
    cwd.mkdir(parents=True)
    links = {name: REPO / name for name in ("hpcprof", "templates", "site_configs", "examples", "tests")}
    for link, target in {**links, "hpcprof-runs": root / "hpcprof-runs"}.items():
        (cwd / link).symlink_to(target)
    return cwd


def console_script(text: str) -> str:
    """The commands of a console block: its `$ ` lines and their continuation lines."""
    commands: list[str] = []
    continued = False
    for line in text.splitlines():
        if continued or line.startswith("$ "):
            commands.append(line.removeprefix("$ ") if not continued else line)
            continued = line.endswith("\\")
    return "\n".join(commands) + "\n"


def check_yaml(block: Block) -> None:
    """Validate a YAML block with hpcprof's own models (decided by its keys)."""
    from hpcprof.config.experiment import Experiment, expand
    from hpcprof.config.site import SiteConfig, find_site
    from hpcprof.config.validation import parse_yaml
    from hpcprof.core.models import fields, validate

    data = parse_yaml(block.text)
    assert isinstance(data, dict), f"{block.where}: YAML that is not a mapping; mark it or show it as text"
    experiment_keys = {f.name for f in fields(Experiment)}
    site_keys = {f.name for f in fields(SiteConfig)}
    if "workload" in data or (set(data) <= experiment_keys and "scheduler" not in data):
        whole = data if "workload" in data else {"name": "docs", "workload": {"kind": "command", "argv": ["true"]},
                                                 **data}
        expand(whole, find_site("local"), block.where)
    elif "scheduler" in data or set(data) <= site_keys:
        whole = data if "scheduler" in data else {"name": "docs", "scheduler": "local",
                                                  "launcher": {"kind": "mpiexec", "flavor": "hydra"}, **data}
        validate(SiteConfig, whole, block.where)
    else:
        raise AssertionError(f"{block.where}: YAML neither an experiment nor a site config (keys {sorted(data)})")


ASSIGNMENT = re.compile(r"^[A-Z][A-Z0-9_]*=.*$", re.MULTILINE)


def run_block(block: Block, cwd: Path, box: Sandbox, assignments: list[str]) -> None:
    """Run or validate one block in `cwd`; a shell block first sets `assignments` (the variables
    the file's earlier shell blocks set) and adds its own."""
    if block.directive and block.directive.startswith("file "):
        (cwd / block.directive.removeprefix("file ")).write_text(block.text)
        if block.lang == "yaml":
            check_yaml(block)
        return
    if block.lang == "yaml":
        check_yaml(block)
    elif block.lang in ("bash", "console"):
        script = block.text if block.lang == "bash" else console_script(block.text)
        assert script.strip(), f"{block.where}: a console block without `$ ` commands; show output as text"
        run(["bash", "-c", "\n".join(["set -eo pipefail", *assignments, script])], cwd, box.env, block.where)
        assignments += ASSIGNMENT.findall(script)
    elif block.lang == "python":
        run([sys.executable, "-c", block.text], cwd, box.env, block.where)
    elif block.lang == "sql":
        with sqlite3.connect(box.root / "hpcprof-runs" / "hpcprof.db") as db:
            rows: list[Any] = db.execute(block.text).fetchall()
        assert rows, f"{block.where}: the query returned no rows from the shared workdir's store"
    elif block.lang == "toml":
        import tomllib

        points = tomllib.loads(block.text).get("project", {}).get("entry-points", {})
        for group, entries in points.items():
            assert all(re.fullmatch(r"[\w.]+:\w+", v) for v in entries.values()), f"{block.where}: {group}"


def runs_here(block: Block) -> bool:
    """Whether the docs test runs the block (CI's script runs those marked `run by .ci/run`)."""
    return block.lang in RUN and skip_reason(block) is None and block.directive != BY_CI


def docs_files() -> Iterator[Any]:
    """The docs files with a block to run; those with a block on the one-node Slurm carry its mark
    (conftest runs them in the Slurm group)."""
    for path in DOCS:
        found = blocks(path)
        if any(runs_here(b) for b in found):
            slurm = any(b.directive == ON_SLURM for b in found)
            yield pytest.param(path, id=str(path.relative_to(REPO)), marks=[pytest.mark.slurm] if slurm else [])


@pytest.mark.slow
@pytest.mark.parametrize("path", list(docs_files()))
def test_docs_blocks_run(path: Path, sandbox: Sandbox, request: pytest.FixtureRequest) -> None:
    """Every block of one docs file, in order, in a directory of its own."""
    on_slurm = any(b.directive == ON_SLURM for b in blocks(path))
    if on_slurm:
        request.getfixturevalue("slurm_cluster")
    if path != REPO / "README.md" and not on_slurm:      # a file on Slurm makes (and reads) its own runs
        seed(sandbox)
    cwd = workspace(sandbox.root, re.sub(r"[^\w.-]", "_", str(path.relative_to(REPO))))
    assignments: list[str] = []
    for block in blocks(path):
        if runs_here(block):
            run_block(block, cwd, sandbox, assignments)


if __name__ == "__main__":
    print(counts())
