"""Debian's PostgreSQL (tests/services/postgres.sh) as a session fixture, and fresh databases on it.
A plugin of tests/conftest.py (`pytest_plugins`): tests name `postgres_server` and import nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """Start Debian's PostgreSQL (initdb in a temp dir, Unix socket) for the session; its base URL."""
    script = str(REPO / "tests/services/postgres.sh")
    where = Path(os.environ.get("HPCPROF_PG_DIR") or tempfile.mkdtemp(prefix="hpcprof-pg-"))
    result = subprocess.run(["bash", script, "start", str(where)], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        pytest.skip(f"PostgreSQL could not be started: {result.stderr.strip()[-300:]}")
    yield result.stdout.strip().splitlines()[-1]
    if "HPCPROF_PG_DIR" not in os.environ:  # ours: stop it and remove its data
        subprocess.run(["bash", script, "stop", str(where)], capture_output=True, timeout=120)
        shutil.rmtree(where, ignore_errors=True)


def fresh_postgres_db(base_url: str) -> str:
    """A new, empty database on the server; its URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    host = base_url.split("host=", 1)[1]
    with psycopg.connect(host=host, user="hpcprof", dbname="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return base_url.replace("/postgres?", f"/{name}?")
