"""The campaign store (SQLAlchemy Core): sweeps, runs (sweep points), jobs, states, results.

A SQLite file in the workdir by default; `--db URL` or `$HPCPROF_DB` for any SQLAlchemy URL
(e.g. postgresql+psycopg://user@host/db). Result tables are stored row by row as JSON so any
analysis output fits without schema changes; `results_frame` reads one back as a DataFrame.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import (JSON, Column, Float, ForeignKey, Integer, MetaData, String, Table, Text,
                        create_engine, delete, insert, select, update)
from sqlalchemy.engine import Engine

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

results = Table(
    "results", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(80), ForeignKey("runs.run_id"), nullable=False, index=True),
    Column("source", String(32), nullable=False),   # nsys | ncu | torch | workload
    Column("name", String(128), nullable=False),    # table name, e.g. cuda_gpu_kern_sum
    Column("row_index", Integer, nullable=False),
    Column("data", JSON, nullable=False),
)


def database_url(workdir: Path, db: str | None = None) -> str:
    """--db, else $HPCPROF_DB, else <workdir>/hpcprof.db."""
    return db or os.environ.get("HPCPROF_DB") or f"sqlite:///{workdir.resolve() / 'hpcprof.db'}"


class Store:
    """The campaign database."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = create_engine(url)
        metadata.create_all(self.engine)

    def add_sweep(self, sweep_id: str, experiment: str, site: str, spec: dict[str, Any],
                  run_rows: list[dict[str, Any]]) -> None:
        """Record a submitted sweep and its runs (one per point) in one transaction."""
        now = time.time()
        with self.engine.begin() as conn:
            conn.execute(insert(sweeps).values(sweep_id=sweep_id, experiment=experiment, site=site,
                                               n_points=len(run_rows), spec=spec, created_at=now))
            conn.execute(insert(runs), [{"sweep_id": sweep_id, "state": "PENDING", **r} for r in run_rows])

    def add_job(self, run_id: str, job_id: str, scheduler: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(jobs).values(job_id=job_id, run_id=run_id, scheduler=scheduler,
                                             submitted_at=time.time()))

    def record_state(self, run_id: str, state: str, exit_code: int | None, reason: str) -> None:
        """Store a state change (nothing if the state is unchanged)."""
        with self.engine.begin() as conn:
            row = conn.execute(select(runs.c.state, runs.c.exit_code).where(runs.c.run_id == run_id)).first()
            if row is None or (row.state, row.exit_code) == (state, exit_code):
                return
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(state=state, exit_code=exit_code))
            conn.execute(insert(states).values(run_id=run_id, state=state, exit_code=exit_code,
                                               reason=reason, observed_at=time.time()))

    def has_run(self, run_id: str) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(select(runs.c.run_id).where(runs.c.run_id == run_id)).first() is not None

    def replace_results(self, run_id: str, source: str, tables: dict[str, pd.DataFrame]) -> None:
        """Replace the stored tables of (run, source): collecting twice changes nothing."""
        with self.engine.begin() as conn:
            conn.execute(delete(results).where(results.c.run_id == run_id, results.c.source == source))
            rows = [{"run_id": run_id, "source": source, "name": name, "row_index": i, "data": record}
                    for name, df in tables.items()
                    for i, record in enumerate(json.loads(df.to_json(orient="records")))]
            if rows:
                conn.execute(insert(results), rows)

    def mark_collected(self, run_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(runs).where(runs.c.run_id == run_id, runs.c.collected_at.is_(None))
                         .values(collected_at=time.time()))

    def runs_frame(self) -> pd.DataFrame:
        with self.engine.connect() as conn:
            return pd.read_sql(select(runs).order_by(runs.c.run_id), conn)

    def results_frame(self, run_id: str, source: str, name: str) -> pd.DataFrame:
        """One stored result table as a DataFrame."""
        query = (select(results.c.data).where(results.c.run_id == run_id, results.c.source == source,
                                              results.c.name == name).order_by(results.c.row_index))
        with self.engine.connect() as conn:
            return pd.DataFrame([row.data for row in conn.execute(query)])

    def result_names(self, run_id: str) -> list[tuple[str, str]]:
        query = select(results.c.source, results.c.name).where(results.c.run_id == run_id).distinct()
        with self.engine.connect() as conn:
            return sorted((r.source, r.name) for r in conn.execute(query))
