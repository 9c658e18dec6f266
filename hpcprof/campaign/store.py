"""The campaign store (SQLAlchemy Core): sweeps, runs (sweep points), jobs, states, and a typed
summary of every collected run that SQL can query across runs.

A SQLite file in the workdir by default (WAL journal, 30 s busy timeout); `--db URL` or
`$HPCPROF_DB` for any SQLAlchemy URL, e.g. `postgresql+psycopg://user@host/db`. Result tables
themselves are Parquet files in each run directory (`hpcprof.run.results`); the store keeps, per run,
its parameters (`run_params`) and headline metrics (`run_metrics`) as typed rows:

    SELECT p.value, m.value FROM run_metrics m JOIN run_params p USING (run_id)
    WHERE m.metric = 'iteration.mean' AND p.param = 'world_size';
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    delete,
    event,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from hpcprof.core.errors import UserError

metadata = MetaData()

sweeps = Table(
    "sweeps", metadata,
    Column("sweep_id", String(64), primary_key=True),
    Column("experiment", String(128), nullable=False),
    Column("site", String(128), nullable=False),
    Column("n_points", Integer, nullable=False),
    Column("spec", JSON, nullable=False),          # the sweep: key -> values
    Column("created_at", Float, nullable=False),
)

runs = Table(
    "runs", metadata,
    Column("run_id", String(80), primary_key=True),
    Column("sweep_id", String(64), ForeignKey("sweeps.sweep_id"), nullable=False),
    Column("point_index", Integer, nullable=False),
    Column("params", JSON, nullable=False),        # this point's sweep values
    Column("experiment", String(128), nullable=False),
    Column("site", String(128), nullable=False),
    Column("run_dir", Text, nullable=False),
    Column("world_size", Integer, nullable=False),
    Column("profile_tool", String(16), nullable=False),
    Column("state", String(32), nullable=False),
    Column("exit_code", Integer),
    Column("collected_at", Float),
    Column("collect_status", String(16)),          # complete | partial (None: not collected)
    Column("collect_note", Text),                  # what was skipped, one line per problem
)

jobs = Table(
    "jobs", metadata,
    Column("job_id", String(160), primary_key=True),
    Column("run_id", String(80), ForeignKey("runs.run_id"), nullable=False),
    Column("scheduler", String(16), nullable=False),
    Column("submitted_at", Float, nullable=False),
)

states = Table(
    "states", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(80), ForeignKey("runs.run_id"), nullable=False),
    Column("state", String(32), nullable=False),
    Column("exit_code", Integer),
    Column("reason", Text, nullable=False, default=""),
    Column("observed_at", Float, nullable=False),
)

run_params = Table(
    "run_params", metadata,
    Column("run_id", String(80), ForeignKey("runs.run_id"), primary_key=True),
    Column("param", String(200), primary_key=True),
    Column("value", Text),                         # as text (JSON for lists and maps)
    Column("value_num", Float),                    # the number, when the value is one
)

run_metrics = Table(
    "run_metrics", metadata,
    Column("run_id", String(80), ForeignKey("runs.run_id"), primary_key=True),
    Column("metric", String(200), primary_key=True),
    Column("value", Float),
    Column("unit", String(32), nullable=False, default=""),
)

resubmits = Table(
    "resubmits", metadata,
    Column("run_id", String(80), ForeignKey("runs.run_id"), primary_key=True),
    Column("resubmit_of", String(80), nullable=False),     # the run it replaces (`hpcprof resubmit`)
)

OURS = set(metadata.tables)


def database_url(workdir: Path, db: str | None = None) -> str:
    """--db, else $HPCPROF_DB, else <workdir>/hpcprof.db."""
    return db or os.environ.get("HPCPROF_DB") or f"sqlite:///{workdir.resolve() / 'hpcprof.db'}"


BUSY_TIMEOUT_S = 30


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    """Busy timeout, WAL and foreign keys on each new SQLite connection. Switching the journal to
    WAL reads, then writes the header: SQLite answers "database is locked" at once, without
    waiting, when another connection writes in between (several processes opening a store made
    in the rollback journal, or a fresh one), so the switch is retried for the busy timeout."""
    cursor = dbapi_conn.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    for attempt in itertools.count():
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(min(0.002 * 2 ** attempt, 0.1))
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _one_line(exc: BaseException) -> str:
    text_ = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text_[0][:200] if text_ else type(exc).__name__


def param_rows(run_id: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """One typed row per parameter of a run."""
    rows = []
    for key, value in sorted(params.items()):
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        shown = value if isinstance(value, str) else json.dumps(value)
        rows.append({"run_id": run_id, "param": str(key), "value": shown, "value_num": number})
    return rows


def make_engine(url: str) -> Engine:
    """The engine of `url` (nothing connected yet); a URL that cannot be used is one line."""
    try:
        return create_engine(url, **({"connect_args": {"timeout": BUSY_TIMEOUT_S}} if url.startswith("sqlite") else {}))
    except ImportError as exc:
        scheme = url.split("://")[0]
        raise UserError(f"--db {scheme}://...: its database driver ({exc.name}) is not installed; install hpcprof "
                        "with the [postgresql] extra (pip install 'hpcprof[postgresql]') and give the URL as "
                        "postgresql+psycopg://user@host/db, or use a sqlite:/// URL") from None
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise UserError(f"--db {url!r}: not a usable database URL ({_one_line(exc)}); use e.g. "
                        "sqlite:////path/hpcprof.db or postgresql+psycopg://user@host/db") from None


def sqlite_file(engine: Engine) -> Path | None:
    """The file of a SQLite engine (None for other databases and in-memory SQLite)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _access(path: Path) -> str:
    """Who owns `path` and its mode, and whether this user may read and write it: `owned by nobody, mode 600,
    not readable or writable by this user`."""
    import pwd
    import stat

    info = path.stat()
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = f"uid {info.st_uid}"
    may = "readable" if os.access(path, os.R_OK) else "not readable"
    may += " and writable" if os.access(path, os.W_OK) else " and not writable" if may == "readable" else " or writable"
    return f"owned by {owner}, mode {stat.S_IMODE(info.st_mode):o}, {may} by this user"


def _free(path: Path) -> str:
    """The space left beside `path` for this user: `0 bytes free on its disk`."""
    try:
        info = os.statvfs(path.parent)
    except OSError as exc:
        return f"its disk cannot be looked at: {exc.strerror}"
    return f"{info.f_bavail * info.f_frsize:,} bytes free on its disk"


def check_ours(path: Path) -> None:
    """Refuse, before anything opens it for writing, an existing file that is not a hpcprof
    store (another SQLite database such as an nsys export, or not SQLite at all). It is read
    through a read-only connection, so it is left exactly as it was."""
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except OSError:
        return  # the engine's own open gives the one-line error
    except sqlite3.OperationalError as exc:   # e.g. another user's store, mode 600
        raise UserError(f"--db {path}: cannot be opened ({exc}; {_access(path)}); run as its owner, or give "
                        "another --db or --workdir") from None
    try:
        present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.OperationalError as exc:     # a full disk: SQLite cannot make its -shm to read a WAL store
        raise UserError(f"--db {path}: cannot be read ({exc}; {_free(path)}); free space there, or give another "
                        "--db or --workdir") from None
    except sqlite3.DatabaseError as exc:
        raise UserError(f"--db {path}: not a hpcprof store ({exc}); give a new file or a hpcprof "
                        "store") from None
    finally:
        conn.close()
    if present and not present & OURS:
        raise UserError(f"--db {path}: not a hpcprof store (it holds other tables: "
                        f"{', '.join(sorted(present)[:3])}); give a new file or a hpcprof store")


class Store:
    """The campaign database. A URL that cannot be used raises UserError (one line, exit 2);
    a file that is not a store is refused before anything writes to it."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = make_engine(url)
        if self.engine.dialect.name == "sqlite":
            if (path := sqlite_file(self.engine)) is not None:
                check_ours(path)
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self.url = url
        self._create_schema()
        event.listen(self.engine, "handle_error", self._refused)

    def _refused(self, context: Any) -> None:
        """Every error of the database once the store is open, as one line naming the store (a store
        of another user, a full disk, a lock held too long): never a driver's traceback. An interrupt
        (Ctrl-C, SystemExit) that reaches the driver is left to propagate: it is not the store's error."""
        if not isinstance(context.original_exception, Exception):
            return
        shown = self.engine.url.render_as_string(hide_password=True)
        message = _one_line(context.original_exception)
        path = sqlite_file(self.engine)
        if "readonly" in message and path is not None:
            try:
                owner = path.stat().st_uid
            except OSError:
                owner = -1
            if owner != os.geteuid():
                import pwd

                try:
                    name = pwd.getpwuid(owner).pw_name
                except KeyError:
                    name = f"uid {owner}"
                raise UserError(f"--db {path}: the store belongs to {name} and this user cannot write it ({message}); "
                                "give a --workdir (or --db) of your own")
        room = f"; {_free(path)}" if path is not None else ""
        raise UserError(f"--db {shown}: the store refused the change ({message}{room}); check the path's permissions "
                        "and free space, or give another --workdir (or --db)")

    def _create_schema(self) -> None:
        """Create the tables once, safely when several processes start on a fresh store."""
        shown = self.engine.url.render_as_string(hide_password=True)
        for attempt in range(20):
            try:
                with self.engine.begin() as conn:
                    if self.engine.dialect.name == "postgresql":
                        conn.execute(text("SELECT pg_advisory_xact_lock(724011)"))
                    present = set(inspect(conn).get_table_names())
                    if present and not present & OURS:
                        raise UserError(f"--db {shown}: not a hpcprof store (it holds other tables: "
                                        f"{', '.join(sorted(present)[:3])}); give a new or hpcprof database")
                    if not OURS <= present:
                        metadata.create_all(conn, checkfirst=True)
                    self._add_columns(conn, shown)
                return
            except UserError:
                raise
            except (DBAPIError, SQLAlchemyError) as exc:
                message = _one_line(exc)
                if "already exists" in message and attempt < 19:
                    time.sleep(0.05 * (attempt + 1))  # another process created it first
                    continue
                raise UserError(f"--db {shown}: cannot open the store ({message}); check the path or "
                                "URL, or move a damaged file away") from None

    def _add_columns(self, conn: Any, shown: str) -> None:
        """The columns a store made by an earlier hpcprof lacks, added where they may be empty
        (collect_status, collect_note); one it cannot do without is a one-line error."""
        for table in metadata.sorted_tables:
            have = {col["name"] for col in inspect(conn).get_columns(table.name)}
            missing = [column for column in table.columns if column.name not in have]
            if needed := [column.name for column in missing if not column.nullable]:
                raise UserError(f"--db {shown}: the store's table {table.name} has no {', '.join(needed)} (a store of "
                                "another hpcprof version); give a new --workdir (or --db), or move the store away")
            for column in missing:
                kind = column.type.compile(dialect=self.engine.dialect)
                conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))

    def add_sweep(self, sweep_id: str, experiment: str, site: str, spec: dict[str, Any],
                  run_rows: list[dict[str, Any]]) -> None:
        """Record a submitted sweep and its runs (one per point) and their parameters, in one transaction."""
        now = time.time()
        with self.engine.begin() as conn:
            conn.execute(insert(sweeps).values(sweep_id=sweep_id, experiment=experiment, site=site,
                                               n_points=len(run_rows), spec=spec, created_at=now))
            if run_rows:
                conn.execute(insert(runs), [{"sweep_id": sweep_id, "state": "PENDING", **r} for r in run_rows])
            params = [p for r in run_rows for p in param_rows(
                r["run_id"], {**r["params"], "world_size": r["world_size"], "profile_tool": r["profile_tool"]})]
            if params:
                conn.execute(insert(run_params), params)

    def link_resubmits(self, links: dict[str, str]) -> None:
        """Record which run each new run replaces."""
        if links:
            with self.engine.begin() as conn:
                conn.execute(insert(resubmits), [{"run_id": new, "resubmit_of": old} for new, old in links.items()])

    def add_job(self, run_id: str, job_id: str, scheduler: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(jobs).values(job_id=job_id, run_id=run_id, scheduler=scheduler,
                                             submitted_at=time.time()))

    def record_states(self, observed: dict[str, tuple[str, int | None, str]]) -> set[str]:
        """Store each run's state change (run id -> state, exit code, reason; nothing for an unchanged
        state or a run the store does not know), in one transaction; returns the run ids it knows."""
        if not observed:
            return set()
        with self.engine.begin() as conn:
            ids, known = list(observed), {}
            for first in range(0, len(ids), 500):  # under old SQLite's 999 bound parameters
                known.update({row.run_id: (row.state, row.exit_code) for row in conn.execute(select(
                    runs.c.run_id, runs.c.state, runs.c.exit_code).where(runs.c.run_id.in_(ids[first:first + 500])))})
            now = time.time()
            changed = [(run_id, *observed[run_id]) for run_id, old in known.items() if old != observed[run_id][:2]]
            for run_id, state, exit_code, _ in changed:
                conn.execute(update(runs).where(runs.c.run_id == run_id).values(state=state, exit_code=exit_code))
            if changed:
                conn.execute(insert(states), [{"run_id": run_id, "state": state, "exit_code": exit_code,
                                               "reason": reason, "observed_at": now}
                                              for run_id, state, exit_code, reason in changed])
        return set(known)

    def has_run(self, run_id: str) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(select(runs.c.run_id).where(runs.c.run_id == run_id)).first() is not None

    def replace_metrics(self, run_id: str, metrics: Iterable[tuple[str, float, str]]) -> None:
        """Replace the run's headline metrics: collecting twice changes nothing."""
        rows = {m: {"run_id": run_id, "metric": m, "value": float(v), "unit": u or ""} for m, v, u in metrics}
        with self.engine.begin() as conn:
            conn.execute(delete(run_metrics).where(run_metrics.c.run_id == run_id))
            if rows:
                conn.execute(insert(run_metrics), list(rows.values()))

    def mark_collected(self, run_id: str, problems: list[str] | None = None) -> None:
        """Record the run as collected: `complete`, or `partial` with what was skipped."""
        with self.engine.begin() as conn:
            conn.execute(update(runs).where(runs.c.run_id == run_id, runs.c.collected_at.is_(None))
                         .values(collected_at=time.time()))
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(
                collect_status="partial" if problems else "complete",
                collect_note="\n".join(problems) if problems else None))

    def run_records(self, run_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The runs' rows by run id (those the store knows), read in one connection."""
        found: dict[str, dict[str, Any]] = {}
        with self.engine.connect() as conn:
            for first in range(0, len(run_ids), 500):  # under old SQLite's 999 bound parameters
                rows = conn.execute(select(runs).where(runs.c.run_id.in_(run_ids[first:first + 500])))
                found.update({row.run_id: dict(row._mapping) for row in rows})
        return found

    def run_record(self, run_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.run_id == run_id)).first()
            return dict(row._mapping) if row else None

    def metrics(self, run_id: str) -> dict[str, tuple[float, str]]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(run_metrics).where(run_metrics.c.run_id == run_id)).all()
            return {r.metric: (r.value, r.unit) for r in rows}
