"""Retention keeps the store true: a recording, snapshot or clip it removes is forgotten by
the store in the same sweep, so no row names a file that is gone."""
import os
import sqlite3

from pipeline.sinks.retention import Retention
from pipeline.sinks.written import WrittenIndex
from pipeline.store.backend import open_sqlite
from pipeline.store.writer import StoreWriter
from test_writer import frame, rows_in, wait_for

OLD, NEW = "gate.rec.20261101T000000Z.mp4", "gate.rec.20261101T000100Z.mp4"
SNAP = "events/gate/20261101T000010.000Z_1.jpg"


def test_files_retention_removes_are_forgotten_by_the_store_in_the_same_sweep(tmp_path):
    index = WrittenIndex(str(tmp_path))
    for i, name in enumerate((OLD, SNAP, NEW)):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * 1000)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # oldest first
        index.add("gate", str(path))
    w = StoreWriter(lambda: open_sqlite(str(tmp_path / "store.db")), str(tmp_path), lambda cam, n: None)
    w.start()
    event = {"event": "enter", "track": 1, "class": "person", "zone": "lawn", "snapshot": SNAP, "recording": OLD,
             "recording_time": 1.0}
    w.offer(frame("gate", 0, track=1, recording=OLD, recording_time=1.0, events=[event]))
    w.offer(frame("gate", 1, track=2, recording=NEW, recording_time=0.0))
    wait_for(lambda: rows_in(tmp_path / "store.db", "segments") == 2)
    retention = Retention(str(tmp_path), index, lambda relative, camera: True, max_bytes=1500, max_age_s=None,
                          on_removed=w.forget)
    removed = retention.sweep()
    assert sorted(os.path.relpath(p, tmp_path) for p in removed) == sorted([OLD, SNAP])
    db = sqlite3.connect(tmp_path / "store.db")  # read before the writer closes: the sweep's own step
    assert db.execute("SELECT path FROM segments").fetchall() == [(NEW,)]
    assert db.execute("SELECT track, snapshot, recording FROM tracks ORDER BY track").fetchall() == [
        (1, None, None), (2, None, NEW)]
    assert db.execute("SELECT snapshot, recording, recording_time FROM events").fetchall() == [(None, None, None)]
    w.close()
