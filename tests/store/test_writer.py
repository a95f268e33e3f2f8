"""The store's writer against a real SQLite file: rows land off the caller's thread, a full
queue drops and counts, a refusing database is tried again then counted, removed files
are forgotten, old rows age out, and a SIGKILL leaves a sound store."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter

from pipeline.store.backend import open_sqlite
from pipeline.store.rows import RowBuilder
from pipeline.store.runlog import RUNLOG
from pipeline.store import writer as store_writer
from pipeline.store.writer import Inbox, StoreWriter


def frame(cam, seq, track=None, t=None, **extra):
    dets = [] if track is None else [{"box": [0, 0, 5, 5], "score": 0.8, "class_id": 0, "class": "person",
                                      "predicted": False, "track": track}]
    return {"camera": cam, "seq": seq, "pts": seq, "time": seq * 0.1 if t is None else t, "detected": True,
            "detections": dets, **extra}


def writer(folder, lost: Counter, **options) -> StoreWriter:
    path = str(folder / "store.db")
    return StoreWriter(lambda: open_sqlite(path), str(folder), lambda cam, n: lost.update({cam: n}), **options)


def wait_for(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def rows_in(path, table="tracks") -> int:
    """How many rows a store being written holds so far (0 before its tables exist)."""
    try:
        return sqlite3.connect(path).execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def test_rows_land_and_the_run_log_names_the_run_and_each_cameras_clock(tmp_path):
    lost: Counter = Counter()
    w = writer(tmp_path, lost)
    w.start()
    for seq in range(5):
        w.offer(frame("gate", seq, track=1))
        w.offer(frame("yard", seq, track=seq))
    w.close()
    db = sqlite3.connect(tmp_path / "store.db")
    assert db.execute("SELECT camera, count(*) FROM tracks GROUP BY camera ORDER BY 1").fetchall() == [
        ("gate", 1), ("yard", 5)]
    (run, started, host), = db.execute("SELECT id, started, host FROM runs").fetchall()
    log = [json.loads(line) for line in (tmp_path / RUNLOG).read_text().splitlines()]
    assert log[0] == {"run": w.key, "started": started, "host": host, "config": None}
    assert [e["camera"] for e in log[1:]] == ["gate", "yard"]
    first_seen = dict(db.execute("SELECT camera, min(first_seen) FROM tracks GROUP BY camera"))
    assert first_seen == {e["camera"]: e["origin"] for e in log[1:]}  # frame 0 is at the camera's origin
    assert not lost


def test_a_cameras_clock_starts_when_its_first_frame_was_read_not_when_it_reached_the_store(tmp_path):
    """The first frame reaches the sink late (the models warm up): a clock set on its
    arrival put every row, and every segment's start, that late behind the recordings'
    names."""
    w = writer(tmp_path, Counter())
    w.start()
    read_at = time.time() - 7.5  # the frame was read 7.5 s before the sink had it
    w.offer(frame("gate", 20, track=1, t=2.0), captured=read_at)
    w.offer(frame("gate", 21, track=1, t=2.1), captured=time.time())  # later frames keep the clock
    w.close()
    db = sqlite3.connect(tmp_path / "store.db")
    first, last = db.execute("SELECT first_seen, last_seen FROM tracks").fetchone()
    assert abs(first - read_at) < 1e-6 and abs(last - (read_at + 0.1)) < 1e-6
    origin = [json.loads(line) for line in (tmp_path / RUNLOG).read_text().splitlines()][1]["origin"]
    assert abs(origin - (read_at - 2.0)) < 1e-6


def test_a_full_queue_drops_records_and_counts_them_while_the_database_is_busy(tmp_path):
    lost: Counter = Counter()
    w = writer(tmp_path, lost, queue_size=16, flush_s=0.2)
    w.start()
    blocker = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another writer holds the database: the store's flush waits
    w.offer(frame("gate", 0, track=0))
    time.sleep(0.6)
    for seq in range(1, 101):
        w.offer(frame("gate", seq, track=seq))  # never waits
    assert lost["gate"] >= 100 - 16
    blocker.execute("ROLLBACK")
    w.close()
    kept = sqlite3.connect(tmp_path / "store.db").execute("SELECT count(*) FROM tracks").fetchone()[0]
    assert kept + lost["gate"] == 101  # every record is in the store or counted lost


def test_rows_a_full_disk_refuses_are_tried_again_then_counted_lost(small_disk):
    folder = small_disk("1m")
    lost: Counter = Counter()
    w = writer(folder, lost, buffer_s=1.0, flush_s=0.1)
    w.start()
    filler = folder / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    for seq in range(300):
        w.offer(frame("gate", seq, track=seq, events=[{"event": "cross", "track": seq, "class": "person",
                                                     "line": "door", "direction": "in", "snapshot": "x" * 200}]))
    wait_for(lambda: lost["gate"] > 0)
    filler.unlink()  # room again: later rows are written
    w.offer(frame("gate", 1000, track=1000))
    w.close()
    db = sqlite3.connect(folder / "store.db")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    tracks, events = (db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("tracks", "events"))
    counts = db.execute("SELECT count(*) FROM counts").fetchone()[0]
    assert tracks + events + counts + lost["gate"] >= 300 * 2 + 1  # each row stored or counted (a count row sums)
    assert db.execute("SELECT count(*) FROM tracks WHERE track = 1000").fetchone()[0] == 1


def test_files_retention_removed_are_forgotten_before_forget_returns(tmp_path):
    snap, clip = "events/gate/20261101T000000.500Z_1.jpg", "events/gate/20261101T000000.500Z_1.mp4"
    rec1, rec2 = "gate.rec.20261101T000000Z.mp4", "gate.rec.20261101T000100Z.mp4"
    lost: Counter = Counter()
    w = writer(tmp_path, lost)
    w.start()
    event = {"event": "enter", "track": 1, "class": "person", "zone": "lawn", "snapshot": snap,
             "clip": clip, "recording": rec1, "recording_time": 0.5}
    w.offer(frame("gate", 0, track=1, recording=rec1, recording_time=0.5, events=[event]))
    w.offer(frame("gate", 1, track=1, recording=rec2, recording_time=0.0))
    wait_for(lambda: rows_in(tmp_path / "store.db", "segments") == 2)
    w.forget([snap, clip, rec1])
    db = sqlite3.connect(tmp_path / "store.db")
    assert db.execute("SELECT path FROM segments").fetchall() == [(rec2,)]
    assert db.execute("SELECT snapshot, clip, recording, recording_time FROM events").fetchall() == [
        (None, None, None, None)]
    assert db.execute("SELECT snapshot, recording, recording_time FROM tracks").fetchall() == [(None, None, None)]
    w.close()


def test_tracks_and_events_age_out_before_the_counts(tmp_path):
    backend = open_sqlite(str(tmp_path / "store.db"))
    rows = RowBuilder(backend.begin_run(0.0, None, None), str(tmp_path))
    cross = {"event": "cross", "track": 1, "class": "car", "line": "gate", "direction": "in"}
    for day in (0, 10, 20):
        rows.add(frame("gate", day, track=day, t=day * 86400.0, events=[dict(cross, track=day)]), 0.0)
    backend.write(rows.take())
    backend.age_out(rows_before=15 * 86400.0, counts_before=5 * 86400.0)
    db = sqlite3.connect(tmp_path / "store.db")
    assert db.execute("SELECT track FROM tracks").fetchall() == [(20,)]
    assert db.execute("SELECT track FROM events").fetchall() == [(20,)]
    assert db.execute("SELECT count(*) FROM track_lines").fetchone() == (1,)
    assert [m for m, in db.execute("SELECT minute FROM counts ORDER BY 1")] == [10 * 86400, 20 * 86400]
    assert db.execute("SELECT hour, n FROM counts_hour ORDER BY 1").fetchall() == [(10 * 86400, 1), (20 * 86400, 1)]


def test_counts_age_out_by_whole_hours_so_hour_buckets_keep_the_sum_of_their_minutes(tmp_path):
    """A cut-off inside an hour left that hour's sum in the hourly rollup while its first
    minutes were gone: an hour bucket counted what its minutes no longer held."""
    backend = open_sqlite(str(tmp_path / "store.db"))
    rows = RowBuilder(backend.begin_run(0.0, None, None), str(tmp_path))
    cross = {"event": "cross", "track": 1, "class": "car", "line": "gate", "direction": "in"}
    for minute in (0, 10, 50, 70):
        rows.add(frame("gate", minute, track=minute, t=minute * 60.0, events=[dict(cross, track=minute)]), 0.0)
    backend.write(rows.take())
    backend.age_out(rows_before=None, counts_before=30 * 60.0)  # half past the first hour
    db = sqlite3.connect(tmp_path / "store.db")
    hourly = dict(db.execute("SELECT hour, sum(n) FROM counts_hour GROUP BY hour"))
    minutes = dict(db.execute("SELECT minute / 3600 * 3600, sum(n) FROM counts GROUP BY minute / 3600"))
    assert hourly == minutes == {0: 3, 3600: 1}


KILLED = """
import sys, time
from collections import Counter
sys.path.insert(0, {tests!r})
from test_writer import frame, writer
from pathlib import Path
w = writer(Path({folder!r}), Counter(), flush_s=0.1)
w.start()
seq = 0
while True:
    w.offer(frame("gate", seq, track=seq))
    seq += 1
    time.sleep(0.001)
"""


def test_a_sigkilled_writer_leaves_a_store_that_opens_and_passes_its_integrity_check(tmp_path):
    script = KILLED.format(tests=os.path.dirname(__file__), folder=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=os.getcwd()))
    try:
        wait_for(lambda: rows_in(tmp_path / "store.db") > 200, timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    backend = open_sqlite(str(tmp_path / "store.db"))  # opens (its quick check passes) and takes a new run
    assert backend.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert backend.conn.execute("SELECT count(*) FROM tracks").fetchone()[0] > 200
    assert backend.begin_run(1.0, None, None) == 2


def test_recordings_past_their_age_are_kept_only_where_they_had_motion_or_objects(tmp_path):
    """Frigate's `motion` retain mode, from the segments' activity: the idle old segment
    goes (file and row), the one with motion and each camera's newest stay, and so does
    one with objects but no motion (recorded before the camera's motion was measured)."""
    from pipeline.store.writer import Budget

    names = [f"{cam}.rec.2026110{i}T000000Z.mp4"
             for cam, i in (("gate", 1), ("gate", 2), ("gate", 3), ("gate", 4), ("yard", 1))]
    for name in names:
        (tmp_path / name).write_bytes(b"\0" * 100)
    lost: Counter = Counter()
    w = writer(tmp_path, lost, flush_s=0.05, budget=Budget(activity="motion_s", idle_s=0.5, every_s=0.1))
    w.start()
    w.offer(frame("gate", 0, 7, recording=names[0], recording_time=0.0))  # objects, no motion measured
    w.offer(frame("gate", 1, 7, recording=names[0], recording_time=0.1))
    w.offer(frame("gate", 2, recording=names[1], recording_time=0.0, motion=True))
    w.offer(frame("gate", 3, recording=names[2], recording_time=0.0))
    w.offer(frame("gate", 4, recording=names[2], recording_time=0.1))  # no motion, no objects: idle
    w.offer(frame("gate", 5, recording=names[3], recording_time=0.0))  # the newest: kept, idle or not
    w.offer(frame("yard", 0, recording=names[4], recording_time=0.0))  # the camera's only one
    wait_for(lambda: not (tmp_path / names[2]).exists())  # the older ones were as old: looked at no later
    w.close()
    kept = [n for n in names if n != names[2]]
    assert sorted(p.name for p in tmp_path.glob("*.mp4")) == kept
    db = sqlite3.connect(tmp_path / "store.db")
    assert [p for p, in db.execute("SELECT path FROM segments ORDER BY path")] == kept
    assert not lost


def test_the_writers_inbox_keeps_the_order_refuses_when_full_and_wakes_the_writer_for_a_control_item(monkeypatch):
    inbox = Inbox(3)
    assert inbox.offer(("frame", 1)) and inbox.offer(("frame", 2)) and inbox.control(("end", "cam"))
    assert not inbox.offer(("frame", 3))  # full: the record is refused (counted lost by the writer)
    assert not inbox.control(("forget", []), timeout=0.01)
    assert list(inbox.take()) == [("frame", 1), ("frame", 2), ("end", "cam")]
    assert list(inbox.take()) == []
    monkeypatch.setattr(store_writer, "DRAIN_S", 30.0)  # only the control item can end the wait early
    later = threading.Timer(0.05, inbox.control, args=(("stop",),))
    later.start()
    t0 = time.monotonic()
    inbox.wait(30.0)
    later.join()
    assert time.monotonic() - t0 < 20 and list(inbox.take()) == [("stop",)]
