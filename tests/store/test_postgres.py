"""The store on a real PostgreSQL server (Debian's package, started on 127.0.0.1 by the
`postgres` fixture): the same schema and rows as SQLite, a server away at start is one
line, a server away while running has the rows buffered, then counted lost."""
import time
from collections import Counter

import pytest

from conftest import run_pipeline
from pipeline.store.backend import open_postgres
from pipeline.store.tables import SCHEMA_VERSION, StoreError
from pipeline.store.writer import StoreWriter
from test_rebuild import config, rebuild
from test_writer import frame, wait_for

TABLES = {
    "runs": "SELECT started, config, host FROM runs ORDER BY id",
    "tracks": "SELECT run, camera, track, class, first_seen, last_seen, best_score, best_box, best_time, labels, zones,"
              " lines, snapshot, recording, recording_time FROM tracks ORDER BY run, camera, track",
    "track_zones": "SELECT t.run, t.camera, t.track, z.zone FROM track_zones z JOIN tracks t ON t.id = z.track_id"
                   " ORDER BY 1, 2, 3, 4",
    "track_lines": "SELECT t.run, t.camera, t.track, l.line, l.direction FROM track_lines l"
                   " JOIN tracks t ON t.id = l.track_id ORDER BY 1, 2, 3, 4, 5",
    "events": "SELECT run, camera, time, event, track, class, line, zone, direction, snapshot, clip, recording,"
              " recording_time FROM events ORDER BY 1, 2, 3, 4, 5, 7, 8",
    "segments": 'SELECT camera, path, start, "end", bytes, motion_s, objects_s FROM segments ORDER BY path',
    "counts": "SELECT * FROM counts ORDER BY 1, 2, 3, 4, 5, 6",
    "counts_hour": "SELECT * FROM counts_hour ORDER BY 1, 2, 3, 4, 5, 6",
}


def dump(conn) -> dict:
    out = {}
    for table, query in TABLES.items():
        cur = conn.cursor()
        cur.execute(query)
        out[table] = [tuple(row) for row in cur.fetchall()]
    return out


def test_a_run_writes_the_same_rows_into_postgresql_as_sqlite_rebuilds(
        postgres_url, short_clips, model_path, write_config, tmp_path, pipeline_cmd):
    import sqlite3

    out = tmp_path / "out"
    snap = run_pipeline(config(short_clips, model_path, url=postgres_url), write_config, str(out))
    assert all(c.store_lost == 0 for c in snap.cameras.values())
    assert not (out / "store.db").exists()
    backend = open_postgres(postgres_url)
    live = dump(backend.conn)
    backend.close()
    assert live["tracks"] and live["events"] and live["counts"] and live["segments"]
    rebuild(pipeline_cmd, out, tmp_path / "rebuilt.db")
    assert dump(sqlite3.connect(tmp_path / "rebuilt.db")) == live


def test_the_schema_is_versioned_on_postgresql_as_on_sqlite(postgres_url):
    backend = open_postgres(postgres_url)
    cur = backend.conn.cursor()
    cur.execute("SELECT value FROM meta WHERE key = 'schema_version'")
    assert cur.fetchone() == (str(SCHEMA_VERSION),)
    cur.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    backend.conn.commit()
    backend.close()
    with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 1}, newer than this pipeline's"):
        open_postgres(postgres_url)


def test_a_server_that_does_not_answer_at_start_is_one_line_naming_it_without_its_password():
    from brokers import free_port

    with pytest.raises(StoreError) as e:
        open_postgres(f"postgresql://pipeline:hunter2@127.0.0.1:{free_port()}/store")
    (line,) = e.value.problems
    assert line.startswith("outputs.store.url: postgresql://pipeline:***@127.0.0.1:") and "cannot connect" in line
    assert "hunter2" not in line


@pytest.fixture
def own_server(postgres):
    """A server of its own, to stop and start again."""
    from postgres_server import PostgresServer

    server = PostgresServer(postgres.bin).start()
    yield server
    server.remove()


def tracks_in(url) -> int:
    backend = open_postgres(url)
    cur = backend.conn.cursor()
    cur.execute("SELECT count(*) FROM tracks")
    n = cur.fetchone()[0]
    backend.close()
    return n


def test_rows_wait_while_the_server_is_away_and_are_counted_lost_past_the_buffer(own_server, tmp_path):
    url = own_server.new_database("store")
    lost: Counter = Counter()
    w = StoreWriter(lambda: open_postgres(url), str(tmp_path), lambda cam, n: lost.update({cam: n}),
                    flush_s=0.1, buffer_s=60.0)
    w.start()
    w.offer(frame("gate", 0, track=0))
    wait_for(lambda: tracks_in(url) == 1)
    own_server.stop()
    for seq in range(1, 11):
        w.offer(frame("gate", seq, track=seq))
    time.sleep(1.0)  # flushes refused meanwhile
    own_server.start()
    wait_for(lambda: tracks_in(url) == 11)  # written once it is back, within the buffer
    assert not lost
    w.flusher.buffer_s = 0.5
    own_server.stop()
    for seq in range(11, 16):
        w.offer(frame("gate", seq, track=seq))
    wait_for(lambda: lost["gate"] == 5)  # five tracks, each a row, counted once the buffer is over
    w.close()
    own_server.start()
    assert tracks_in(url) == 11


def test_a_rebuild_goes_into_an_empty_postgresql_database_only(postgres, short_clips, model_path, write_config,
                                                               tmp_path, pipeline_cmd):
    import subprocess

    import yaml

    out = tmp_path / "out"
    run_pipeline(config(short_clips, model_path), write_config, str(out))  # SQLite, the JSON lines beside it
    url = postgres.new_database("rebuilt")
    cfg = config(short_clips, model_path, url=url)
    cfg["outputs"]["dir"] = str(out)
    path = tmp_path / "pg.yaml"
    path.write_text(yaml.safe_dump(cfg))

    def store(*args):
        return subprocess.run([*pipeline_cmd, "store", *args, "--config", str(path)], capture_output=True, text=True,
                              timeout=300)

    r = store("rebuild")
    assert r.returncode == 0 and "postgresql://postgres@127.0.0.1" in r.stdout, r.stderr
    r = store("check")
    assert r.returncode == 0 and "ok (runs 1, tracks " in r.stdout, r.stderr
    r = store("rebuild")
    assert r.returncode == 2 and "holds a store already: rebuild into an empty database" in r.stderr
