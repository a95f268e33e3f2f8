"""The store's schema opens empty databases at the newest version, brings older ones up to
date step by step, and refuses a newer one without touching it."""
import sqlite3

import pytest

from pipeline.store import tables as schema
from pipeline.store.tables import MIGRATIONS, SCHEMA_VERSION, SQLITE, Migration, StoreError, migrate


def tables(conn):
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_an_empty_database_gets_every_table_and_the_newest_version(tmp_path):
    conn = sqlite3.connect(tmp_path / "store.db")
    assert migrate(conn, SQLITE, "store.db") == 0
    assert set(schema.TABLES) <= tables(conn)
    assert schema.stored_version(conn, SQLITE) == SCHEMA_VERSION
    assert float(dict(conn.execute("SELECT key, value FROM meta"))["created_at"]) > 0


def test_opening_again_changes_nothing(tmp_path):
    conn = sqlite3.connect(tmp_path / "store.db")
    migrate(conn, SQLITE, "store.db")
    conn.execute("INSERT INTO runs (started) VALUES (1.5)")
    conn.commit()
    assert migrate(conn, SQLITE, "store.db") == SCHEMA_VERSION
    assert conn.execute("SELECT started FROM runs").fetchall() == [(1.5,)]


def test_an_older_store_is_brought_up_to_date_and_keeps_its_rows(tmp_path, monkeypatch):
    conn = sqlite3.connect(tmp_path / "store.db")
    migrate(conn, SQLITE, "store.db")
    conn.execute("INSERT INTO runs (started) VALUES (2.0)")
    conn.commit()
    step = Migration(SCHEMA_VERSION + 1, "a note per run", ("ALTER TABLE runs ADD COLUMN note TEXT",))
    monkeypatch.setattr(schema, "MIGRATIONS", MIGRATIONS + [step])
    monkeypatch.setattr(schema, "SCHEMA_VERSION", step.version)
    assert migrate(conn, SQLITE, "store.db") == step.version - 1
    assert conn.execute("SELECT started, note FROM runs").fetchall() == [(2.0, None)]
    assert schema.stored_version(conn, SQLITE) == step.version


def test_a_failing_step_leaves_the_store_at_its_version(tmp_path, monkeypatch):
    conn = sqlite3.connect(tmp_path / "store.db")
    migrate(conn, SQLITE, "store.db")
    step = Migration(SCHEMA_VERSION + 1, "broken", ("ALTER TABLE runs ADD COLUMN note TEXT",
                                                     "ALTER TABLE nowhere ADD COLUMN x TEXT"))
    monkeypatch.setattr(schema, "MIGRATIONS", MIGRATIONS + [step])
    monkeypatch.setattr(schema, "SCHEMA_VERSION", step.version)
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, SQLITE, "store.db")
    assert schema.stored_version(conn, SQLITE) == step.version - 1
    assert "note" not in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]


def test_a_newer_store_is_refused_naming_both_versions_and_left_alone(tmp_path):
    conn = sqlite3.connect(tmp_path / "store.db")
    migrate(conn, SQLITE, "store.db")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 5),))
    conn.commit()
    with pytest.raises(StoreError) as e:
        migrate(conn, SQLITE, "/data/store.db")
    (line,) = e.value.problems
    assert f"version {SCHEMA_VERSION + 5}" in line and f"pipeline's {SCHEMA_VERSION}" in line
    assert line.startswith("/data/store.db: ")
    assert schema.stored_version(conn, SQLITE) == SCHEMA_VERSION + 5


def test_the_placeholders_follow_the_dialect():
    statement = "SELECT * FROM tracks WHERE camera = ? AND class = ?"
    assert SQLITE.sql(statement) == statement
    assert schema.POSTGRES.sql(statement) == "SELECT * FROM tracks WHERE camera = %s AND class = %s"
    assert "DOUBLE PRECISION" in schema.POSTGRES.ddl("x {real}")


def _open_and_enter(path: str) -> int:
    from pipeline.store.backend import open_sqlite

    backend = open_sqlite(path)
    run = backend.begin_run(1.0, None, None)
    backend.close()
    return run


def test_processes_opening_one_new_store_at_once_create_it_once_and_each_gets_its_run(tmp_path):
    """A cluster's hosts open the store of their shared folder together."""
    import multiprocessing

    for attempt in range(2):
        path = str(tmp_path / f"store{attempt}.db")
        with multiprocessing.get_context("spawn").Pool(4) as pool:
            assert sorted(pool.map(_open_and_enter, [path] * 4)) == [1, 2, 3, 4]


def test_a_store_another_process_holds_locked_is_an_error_not_damage(tmp_path, monkeypatch):
    from pipeline.store import backend
    from pipeline.store.backend import Damaged, open_sqlite

    monkeypatch.setattr(backend, "BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "store.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE other (x)")
    holder.execute("BEGIN EXCLUSIVE")  # another program holds the file: not even a read gets in
    with pytest.raises(StoreError) as e:
        open_sqlite(str(path))
    assert not isinstance(e.value, Damaged) and f"{path}: the store cannot be opened" in e.value.problems[0]
    holder.execute("ROLLBACK")
    assert not list(tmp_path.glob("store.db.*"))  # nothing moved aside


def test_a_version_1_store_gets_its_hourly_rollup_from_the_counts_it_holds(tmp_path, monkeypatch):
    conn = sqlite3.connect(tmp_path / "store.db")
    monkeypatch.setattr(schema, "MIGRATIONS", MIGRATIONS[:1])
    monkeypatch.setattr(schema, "SCHEMA_VERSION", 1)
    migrate(conn, SQLITE, "store.db")
    conn.executemany("INSERT INTO counts VALUES ('gate', ?, 'line', 'door', 'car', 'in', ?)",
                     [(7200, 2), (7260, 3), (10800, 4)])
    conn.commit()
    monkeypatch.undo()
    assert migrate(conn, SQLITE, "store.db") == 1
    assert conn.execute("SELECT hour, n FROM counts_hour ORDER BY hour").fetchall() == [(7200, 5), (10800, 4)]
