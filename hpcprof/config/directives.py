"""Values that go into #PBS / #SBATCH lines, checked per scheduler and field.

A batch directive is not shell-quoted: a `,` or `=` in a value can start another resource
(`filesystems: "home,walltime=72:00:00"` gives `-l filesystems=home,walltime=72:00:00`). So each
field a scheduler renders has its own allowed form (`check_fields`), and the rendered script is
parsed back and its walltime and node count checked against the site maxima (`check_rendered`).
The scheduler modules and templates call these; nothing else decides what a directive may hold.
"""

from __future__ import annotations

import re
from typing import Any

from hpcprof.config.schedulers import dialect
from hpcprof.core.errors import UserError

NAME = r"[A-Za-z0-9_.\-]+"
#: directive dialect (hpcprof.config.schedulers: pbs for PBS Pro and Torque, slurm) -> field ->
#: (pattern, example); fields not listed are not rendered by that dialect's schedulers.
FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "pbs": {
        "queue": (rf"{NAME}(@{NAME})?", "debug or prod@server"),
        "account": (NAME, "myproject"),
        "filesystems": (r"[A-Za-z0-9_\-]+(:[A-Za-z0-9_\-]+)*", "home:eagle"),
        "pbs_select": (rf"{NAME}={NAME}(:{NAME}={NAME})*", "system=polaris"),
    },
    "slurm": {
        "queue": (NAME, "normal"),
        "partition": (rf"{NAME}(,{NAME})*", "gpu or gpu,debug"),
        "account": (NAME, "myproject"),
        "constraint": (r"[A-Za-z0-9_.\-:&|,*\[\]]+", "a100&ib"),
    },
}
MAX_WALLTIME_HOURS = 10_000


def walltime_seconds(value: str) -> int:
    """Seconds in `[H]H:MM:SS` or `MM:SS`; ValueError naming the form when it is not one."""
    match = re.fullmatch(r"(?:(\d{1,5}):)?([0-5]?\d):([0-5]\d)", value)
    if match is None:
        raise ValueError("walltime must look like HH:MM:SS with minutes and seconds below 60, "
                         "e.g. 00:30:00")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total == 0:
        raise ValueError("walltime 0 would mean no limit on some schedulers; give a positive time, "
                         "e.g. 00:30:00")
    if hours > MAX_WALLTIME_HOURS:
        raise ValueError(f"walltime over {MAX_WALLTIME_HOURS} hours")
    return total


def check_fields(scheduler: str, values: dict[str, Any], where: str = "") -> None:
    """Check the directive fields `scheduler` renders: `values` by the path that names each in its
    config (`resources.queue`, `defaults.queue`, `pbs_select`: the error names it; None passes)."""
    rules = FIELDS.get(dialect(scheduler) or "", {})
    for path, value in values.items():
        rule = rules.get(path.rpartition(".")[2])
        if rule is not None and value is not None and not re.fullmatch(rule[0], str(value)):
            raise UserError(f"{where + ': ' if where else ''}field '{path}': {value!r} cannot go into a {scheduler} "
                            f"directive (a ',' or '=' there would start another resource); use the form {rule[1]}")


def _directive_values(kind: str, script: str) -> dict[str, list[str]]:
    """`key -> values` of the resource directives of dialect `kind` in a rendered script."""
    found: dict[str, list[str]] = {}
    prefix = "#PBS" if kind == "pbs" else "#SBATCH"
    for line in script.splitlines():
        if not line.startswith(prefix + " "):
            continue
        words = line[len(prefix):].split()
        items: list[str] = []
        if kind == "pbs":
            for flag, arg in zip(words, [*words[1:], ""], strict=True):
                if flag == "-l":
                    for chunk in arg.split(","):  # select=N:key=value:... (nodes=N:ppn=M: Torque) has its own
                        items += chunk.split(":") if chunk.startswith(("select=", "nodes=")) else [chunk]
                elif flag in ("-A", "-q") and ("," in arg or "=" in arg):
                    items.append(f"{flag}={arg}")
        else:
            items = [w.removeprefix("--") for w in words]
            items = ["time=" + w[2:] if w.startswith("-t") else w for w in items]
        for item in items:
            key, sep, value = item.partition("=")
            if sep:
                found.setdefault(key, []).append(value)
    return found


def check_rendered(scheduler: str, script: str, max_walltime: str | None, max_nodes: int | None,
                   where: str) -> None:
    """Parse the directives of a rendered job script back and check them: one walltime, within
    the site maximum; a node count within the site maximum; no resource smuggled into -A/-q."""
    kind = dialect(scheduler)
    if kind is None:
        return
    found = _directive_values(kind, script)
    smuggled = [k for k in found if k in ("-A", "-q")]
    if smuggled:
        raise UserError(f"{where}: rendered {smuggled[0]} directive holds a resource list; "
                        "account and queue take a plain name")
    times = found.get("walltime" if kind == "pbs" else "time", [])
    if len(times) != 1:
        raise UserError(f"{where}: the rendered job script sets the walltime {len(times)} times "
                        f"({', '.join(times) or 'none'}); it must set it once")
    try:
        seconds = walltime_seconds(times[0])
    except ValueError as exc:
        raise UserError(f"{where}: rendered walltime {times[0]!r}: {exc}") from None
    if max_walltime and seconds > walltime_seconds(max_walltime):
        raise UserError(f"{where}: rendered walltime {times[0]} exceeds the site maximum {max_walltime}")
    nodes = [*found.get("select", []), *found.get("nodes", [])] if kind == "pbs" else found.get("nodes", [])
    if len(nodes) != 1 or not nodes[0].isdigit():
        raise UserError(f"{where}: the rendered job script must set the node count once "
                        f"(found {', '.join(nodes) or 'none'})")
    if max_nodes and int(nodes[0]) > max_nodes:
        raise UserError(f"{where}: rendered node count {nodes[0]} exceeds the site maximum {max_nodes}")
