"""The campaign store on SQLite and on a real PostgreSQL server (tests/services/postgres.sh):
typed params and metrics queryable across runs, concurrent first use, unusable URLs."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from postgres_server import fresh_postgres_db
from sqlalchemy import text

from hpcprof.campaign.store import Store
from hpcprof.core.errors import UserError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])   # slow: a service
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL of each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return fresh_postgres_db(request.getfixturevalue("postgres_server"))


def _sweep(store: Store, sweep: str, n: int) -> list[str]:
    ids = [f"{sweep}-p{i:03d}" for i in range(n)]
    store.add_sweep(sweep, "exp", "local", {"workload.args.n": [1, 2, 4]}, [
        {"run_id": rid, "point_index": i, "params": {"workload.args.n": 2 ** i, "label": f"x{i}"},
         "experiment": "exp", "site": "local", "run_dir": f"/r/{rid}", "world_size": 2, "profile_tool": "nsys"}
        for i, rid in enumerate(ids)])
    return ids


def test_params_and_metrics_are_typed_and_queryable_across_runs(store_url: str) -> None:
    store = Store(store_url)
    ids = _sweep(store, "s1", 3)
    for i, rid in enumerate(ids):
        store.replace_metrics(rid, [("iteration.mean", 10.0 / (i + 1), "ms"), ("gpu.busy", 0.5, "")])
    store.replace_metrics(ids[0], [("iteration.mean", 9.0, "ms")])      # collecting again replaces
    store.mark_collected(ids[1], ["nsys: rank1.sqlite: skipped (damaged)"])
    store.mark_collected(ids[2])
    query = text("SELECT p.value_num, m.value FROM run_metrics m JOIN run_params p ON p.run_id = m.run_id "
                 "WHERE m.metric = 'iteration.mean' AND p.param = 'workload.args.n' ORDER BY p.value_num")
    with store.engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(query)]
    assert rows == [(1.0, 9.0), (2.0, 5.0), (4.0, 10.0 / 3)]
    assert store.metrics(ids[0]) == {"iteration.mean": (9.0, "ms")}
    assert store.run_record(ids[1])["collect_status"] == "partial"
    assert "rank1.sqlite" in store.run_record(ids[1])["collect_note"]
    assert store.run_record(ids[2])["collect_status"] == "complete"
    with store.engine.connect() as conn:
        label = conn.execute(text("SELECT value, value_num FROM run_params WHERE param = 'label' "
                                  "AND run_id = :r"), {"r": ids[1]}).one()
    assert tuple(label) == ("x1", None)


def _open(url: str) -> str:
    Store(url)
    return "ok"


def test_first_use_is_safe_under_concurrency(store_url: str) -> None:
    with ProcessPoolExecutor(8) as pool:
        assert list(pool.map(_open, [store_url] * 16)) == ["ok"] * 16
    Store(store_url).add_sweep("s", "e", "local", {}, [])


def test_switch_to_wal_waits_for_a_writer(tmp_path: Path) -> None:
    """A store in the rollback journal (an older one, or one being made) opened while another
    connection writes: SQLite refuses the switch to WAL at once ("database is locked", no busy
    wait), which made concurrent first use fail now and then; the open waits for the writer."""
    path = tmp_path / "store.db"
    Store(f"sqlite:///{path}").engine.dispose()  # then back to the rollback journal
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO sweeps (sweep_id, experiment, site, n_points, spec, created_at) "
                   "VALUES ('w', 'e', 'local', 0, '{}', 0)")
    with sqlite3.connect(path, timeout=5) as probe, pytest.raises(sqlite3.OperationalError, match="locked"):
        probe.execute("PRAGMA journal_mode = WAL")  # what SQLite does: no wait, an error
    release = threading.Timer(0.3, writer.execute, ["COMMIT"])
    release.start()
    started = time.monotonic()
    store = Store(f"sqlite:///{path}")
    release.join()
    assert time.monotonic() - started >= 0.2
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("SELECT sweep_id FROM sweeps")).scalars().all() == ["w"]
    writer.close()


def test_sqlite_store_uses_wal(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'x.db'}")
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30000


@pytest.mark.parametrize("make", ["bogus", "not_a_db", "foreign"])
def test_unusable_store_is_one_line_exit_2(make: str, tmp_path: Path) -> None:
    if make == "bogus":
        url = "bogus://"
    else:
        path = tmp_path / "x.db"
        if make == "not_a_db":
            path.write_bytes(os.urandom(8192))
        else:
            import sqlite3

            with sqlite3.connect(path) as conn:
                conn.execute("CREATE TABLE customers (id INTEGER)")
        url = f"sqlite:///{path}"
    with pytest.raises(UserError):
        Store(url)
    (tmp_path / "w").mkdir()
    result = hpcprof("collect", "--db", url, workdir=tmp_path / "w", cwd=Path.cwd(), timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "--db" in result.stderr


def test_a_store_of_an_earlier_hpcprof_is_upgraded(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    Store(f"sqlite:///{path}").engine.dispose()
    with sqlite3.connect(path) as conn:                     # the schema before run_metrics/collect_status
        conn.execute("ALTER TABLE runs DROP COLUMN collect_status")
        conn.execute("ALTER TABLE runs DROP COLUMN collect_note")
        conn.execute("DROP TABLE run_metrics")
    store = Store(f"sqlite:///{path}")
    [rid] = _sweep(store, "s", 1)
    store.mark_collected(rid, ["a problem"])
    store.replace_metrics(rid, [("iteration.mean", 1.0, "ms")])
    assert store.run_record(rid)["collect_status"] == "partial"
    assert store.metrics(rid) == {"iteration.mean": (1.0, "ms")}
