"""The per-user record of the workdirs `submit` used, so that `status`, `collect`, `report` and
`compare` find runs submitted elsewhere (`--site S`, or the listing when the current workdir has
none)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from hpcprof.core.atomic import WriteError, atomic_write


def known_workdirs_file() -> Path:
    """The per-user list of the workdirs submit used: $XDG_STATE_HOME/hpcprof/workdirs
    (default ~/.local/state/hpcprof/workdirs), one `site<TAB>absolute path` per line."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "hpcprof" / "workdirs"


def known_workdirs() -> list[tuple[str, Path]]:
    """(site, workdir) pairs submit recorded, oldest first (an unreadable file: none)."""
    try:
        lines = known_workdirs_file().read_text().splitlines()
    except (OSError, UnicodeError):
        return []
    pairs = [tuple(line.split("\t", 1)) for line in lines if "\t" in line]
    return [(site, Path(path)) for site, path in pairs]


def record_workdir(site: str, workdir: Path) -> None:
    """Remember that a submit to `site` wrote runs under `workdir` (moved to the end if known)."""
    entry = (site, workdir.resolve())
    pairs = [pair for pair in known_workdirs() if pair != entry] + [entry]
    path = known_workdirs_file()
    try:
        atomic_write(path, "".join(f"{site}\t{where}\n" for site, where in pairs[-200:]), what="workdir record")
    except WriteError as exc:
        raise OSError(errno.EIO, f"could not record the workdir in {path}: {exc.strerror}") from None
