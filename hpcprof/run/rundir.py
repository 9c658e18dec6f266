"""The run directory `<workdir>/<experiment>/<run-id>/`: its layout, and reading and writing its
files (the state they add up to is hpcprof.campaign.jobstate's).

Layout: config.json (the run record: the resolved config, read back typed by hpcprof.run.record),
job.sh, rank_wrapper.sh, logs/, profiles/<tool>/, results/, tmp/, inject/ (the ranks' start-up hook),
steps/ (the optimizer step hook's steps per rank), derived/ (collect's own
intermediate files, e.g. exported .sqlite), `status` (key=value lines written by the job: start,
host, job_id, exit_code, end; and `cancelled=` by `mark_cancelled`),
`DONE` (written last by the job), `submission.json` (written at submit: scheduler, job id),
`state.stored` (the final state the store holds), `collect.stored` (how the store says it was collected).
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcprof.core.atomic import atomic_write
from hpcprof.core.errors import UnsafeFile, UserError, warn
from hpcprof.core.safe_paths import append_regular, read_regular, read_tail

#: A run id as new_run_id makes them (and as `status RUN` accepts them): no glob characters.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
#: how much of the end of the job log `log_tail` reads
LOG_TAIL_BYTES = 1 << 16


def new_run_id() -> str:
    """A run id fixed once at submit: time stamp + random suffix (a sweep point adds -pNNN)."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"


class DamagedRunFile(UserError):
    """A run file hpcprof wrote that cannot be read back (config.json): one line naming it."""


#: what a run's config.json says it is (written from record version 1 on; a run written before
#: has neither key and reads as version 0)
RECORD_FORMAT = "hpcprof.run"
#: raised only by a change older readers cannot read: a newer record is refused by name
RECORD_VERSION = 1


def config_problem(data: Any) -> str | None:
    """What is wrong with a loaded config.json, or None: the keys every reader uses, and the record's
    format and version."""
    if not isinstance(data, dict):
        return "not a JSON object"
    experiment = data.get("experiment")
    if not isinstance(experiment, dict) or not isinstance(experiment.get("name"), str):
        return "no experiment.name"
    for part, key in (("workload", "kind"), ("profile", "tool")):
        if not isinstance(experiment.get(part), dict) or not isinstance(experiment[part].get(key), str):
            return f"no experiment.{part}.{key}"
    if not isinstance(data.get("site"), dict):
        return "no site"
    if not isinstance(data.get("sweep_point"), dict):
        return "no sweep_point"
    if data.get("format", RECORD_FORMAT) != RECORD_FORMAT:
        return f"format {data['format']!r}, not {RECORD_FORMAT!r}"
    version = data.get("version")
    if isinstance(version, int) and version > RECORD_VERSION:
        return f"record version {version}: written by a newer hpcprof (this one reads up to {RECORD_VERSION})"
    return None


def damaged(path: Path, reason: str) -> DamagedRunFile:
    """The one-line error of a run file that cannot be read back."""
    return DamagedRunFile(f"{path}: damaged run file ({reason}); this run cannot be read "
                          "(move its directory away, or resubmit the experiment)")


def read_config(path: Path) -> dict[str, Any]:
    """The JSON of a run's config.json, its keys checked (config_problem); DamagedRunFile (one line
    naming the file) when it cannot be read. Its typed reading is hpcprof.run.record.read_record's."""
    try:
        data = json.loads(read_regular(path).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise damaged(path, getattr(exc, "strerror", None) or str(exc).splitlines()[0][:120]) from None
    if (problem := config_problem(data)) is not None:
        raise damaged(path, problem)
    return data


@dataclass(frozen=True)
class RunDir:
    """One run's directory."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @functools.cached_property
    def config_json(self) -> dict[str, Any]:
        """config.json's JSON (read_config), read once per RunDir: what hpcprof.run.record.read_record
        reads the typed run record from; DamagedRunFile (one line naming the file) when it cannot be read."""
        return read_config(self.path / "config.json")

    def damage(self) -> str | None:
        """The one line naming the run's damaged config.json, or None when it reads."""
        try:
            _ = self.config_json
        except DamagedRunFile as exc:
            return exc.format_message()
        return None

    @functools.cached_property
    def submission(self) -> dict[str, Any]:
        """What submit recorded; {} before submit; {"error": ...} when the file is damaged. Read once
        per RunDir: submit writes it once, through `record_submission` (which updates this)."""
        path = self.path / "submission.json"
        try:
            data = json.loads(read_regular(path))
            if isinstance(data, dict) and isinstance(data.get("job_id"), str) and isinstance(data.get("scheduler"), str):
                return data
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            pass
        return {"error": f"{path} is damaged (not the JSON submit wrote)"}

    def record_submission(self, scheduler: str, job_id: str) -> None:
        data = {"scheduler": scheduler, "job_id": job_id, "submitted_at": time.time()}
        atomic_write(self.path / "submission.json", json.dumps(data, indent=1))
        self.__dict__["submission"] = data  # the cached read (a frozen dataclass: no setattr)

    def job_status(self) -> dict[str, str]:
        """The key=value lines the job wrote (last value of a key wins); a line that is not
        UTF-8 text is kept as `damaged` (the first one), see `state`."""
        path = self.path / "status"
        try:
            raw = read_regular(path)
        except UnsafeFile as exc:   # a FIFO, a device, a huge file: named, never waited on or read on
            return {"damaged": f"{path}: {exc.strerror}"}
        except OSError:
            return {}
        status: dict[str, str] = {}
        for number, line in enumerate(raw.splitlines(), 1):
            try:
                key, sep, value = line.decode("utf-8").partition("=")
            except UnicodeDecodeError:
                status.setdefault("damaged", f"{path}: line {number} is not UTF-8 text")
                continue
            if sep:
                status[key] = value
        return status

    def stored_state(self) -> bytes | None:
        """The `state.stored` note (see `store_state`), or None."""
        try:
            return read_regular(self.path / "state.stored")
        except OSError:
            return None

    def store_state(self, note: str) -> None:
        """Note the final state the store now holds."""
        atomic_write(self.path / "state.stored", note)

    def stored_collect(self) -> str | None:
        """How the store says the run was collected (the `collect.stored` note: `complete`, or
        `partial: ` and the first problem), None when not noted; a damaged note is named."""
        path = self.path / "collect.stored"
        try:
            note = read_regular(path).decode("utf-8").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError):
            note = ""
        if note == "complete" or note.startswith("partial"):
            return note
        return f"{path} is damaged; collect the run again: hpcprof collect {self.run_id}"

    def store_collect(self, problems: list[str]) -> None:
        """Note how the store now says the run was collected (see `stored_collect`)."""
        first = problems[0].splitlines()[0] if problems and problems[0].strip() else ""
        atomic_write(self.path / "collect.stored", ("partial" + (f": {first}" if first else "")) if problems
                     else "complete")

    def mark_cancelled(self) -> None:
        """Add `cancelled=EPOCH` to the status file: hpcprof asked the scheduler to stop the job."""
        append_regular(self.path / "status", f"cancelled={int(time.time())}\n".encode())

    @property
    def done(self) -> bool:
        return (self.path / "DONE").exists()

    def log_tail(self) -> str:
        """The last LOG_TAIL_BYTES of the job log (logs/job.out), '' when it cannot be read."""
        try:
            return read_tail(self.path / "logs" / "job.out", LOG_TAIL_BYTES).decode(errors="replace")
        except OSError:
            return ""


def find_run(ref: str, workdir: Path) -> RunDir:
    """A run named by its path or by its id (searched under `workdir`)."""
    path = Path(ref)
    if (path / "config.json").is_file():
        return RunDir(path.resolve())
    if not RUN_ID.fullmatch(ref):
        raise UserError(f"run {ref!r}: not a run id (letters, digits and _.- only) nor a run directory")
    matches = [Path(p).parent for p in glob.glob(f"{glob.escape(str(workdir))}/*/{ref}/config.json")]
    if len(matches) == 1:
        return RunDir(matches[0].resolve())
    if not matches:
        raise UserError(f"run {ref!r}: no such run directory or run id under {workdir}")
    raise UserError(f"run {ref!r}: ambiguous, matches {', '.join(str(m) for m in matches)}")


def sweep_of(run_id: str) -> str:
    """The sweep id of a run id (`<sweep>-p003` -> `<sweep>`; a single-point run is its sweep)."""
    head, sep, tail = run_id.rpartition("-p")
    return head if sep and tail.isdigit() else run_id


def readable(runs: list[RunDir]) -> list[RunDir]:
    """The runs whose config.json reads; each damaged one is named in a warning and left out,
    so one damaged run never hides the others."""
    kept = []
    for run in runs:
        if (problem := run.damage()) is None:
            kept.append(run)
        else:
            warn(f"{problem}; skipped")
    return kept


def has_runs(workdir: Path) -> bool:
    """Whether `workdir` holds a run directory (read or not): one directory listing at most per
    experiment, no config.json read."""
    return next(workdir.glob("*/*/config.json"), None) is not None


def all_runs(workdir: Path, damaged: bool = False) -> list[RunDir]:
    """Every run under `workdir` (run_paths), oldest first; those with a damaged config.json (one
    that cannot be read) only with `damaged` (else each is named in a warning). Paths are resolved
    once, through the workdir (a run or experiment directory that is a link is resolved on its own)."""
    base = workdir.resolve()
    found = sorted(run_paths(base), key=lambda p: p.name)
    runs = [RunDir(p.resolve() if p.is_symlink() or p.parent.is_symlink() else p) for p in found]
    return runs if damaged else readable(runs)


def run_paths(base: Path) -> list[Path]:
    """The run directories `<experiment>/<run>/` under `base` (those holding a config.json, as the
    glob `*/*/config.json` finds them), each run id once. Nothing is left out without a word: a run
    directory that cannot be looked into is listed (reading its config.json then says why), an
    experiment directory that cannot be listed is named in a warning, and of one run id under
    several experiments (a copied run: the store keeps one record per run id) the others are named
    and left out."""
    found: list[Path] = []
    for experiment in _listing(base):
        try:
            runs = _listing(experiment)
        except NotADirectoryError:
            continue
        except OSError as exc:
            warn(f"{experiment}: cannot be read ({exc.strerror}); its runs are left out")
            continue
        for run in runs:
            try:
                os.lstat(run / "config.json")
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:         # not to be looked into: listed, and named when read
                pass
            found.append(run)
    by_id: dict[str, list[Path]] = {}
    for path in found:
        by_id.setdefault(path.name, []).append(path)
    for run_id, paths in by_id.items():
        if len(paths) > 1:
            kept = next((p for p in paths if _experiment_of(p) == p.parent.name), paths[0])
            warn(f"run id {run_id} is in {len(paths)} experiments ({', '.join(str(p) for p in paths)}): one run id "
                 f"is one run (one record in the store); {kept} is used, move the others away")
            found = [p for p in found if p.name != run_id or p == kept]
    return found


def _listing(directory: Path) -> list[Path]:
    """The entries of `directory` that a glob `*` matches (not hidden), in name order."""
    with os.scandir(directory) as entries:
        return sorted(Path(e.path) for e in entries if not e.name.startswith("."))


def _experiment_of(path: Path) -> str | None:
    """The experiment a run directory's config.json names (None: it does not read)."""
    try:
        return str(RunDir(path).config_json["experiment"]["name"])
    except DamagedRunFile:
        return None


def latest_sweep(runs: list[RunDir]) -> str:
    """The sweep of the run submitted last: by the time submit recorded (submission.json), else by
    when its config.json was written; never by the run id's wall-clock time, which a change of
    timezone reorders."""
    def submitted(run: RunDir) -> float:
        at = run.submission.get("submitted_at")
        if isinstance(at, (int, float)) and not isinstance(at, bool):
            return float(at)
        try:
            return (run.path / "config.json").stat().st_mtime
        except OSError:
            return float("-inf")

    return sweep_of(max(runs, key=lambda run: (submitted(run), run.run_id)).run_id)


def select_runs(refs: tuple[str, ...] | list[str], workdir: Path) -> list[RunDir]:
    """Runs named by run id, run directory or sweep id (all its points), each once, in order;
    those with a damaged config.json are named in a warning and left out (all of them
    damaged: a one-line error naming the first)."""
    runs = all_runs(workdir, damaged=True) if workdir.is_dir() else []
    selected: list[RunDir] = []
    for ref in refs:
        points = [r for r in runs if r.run_id == ref or r.run_id.startswith(ref + "-p")]
        if not points:
            points = [find_run(ref, workdir)]
        selected += [p for p in points if p not in selected]
    if selected and all(run.damage() for run in selected):
        raise DamagedRunFile(str(selected[0].damage()))
    return readable(selected)
