"""A real run with the store on (the sample clips, tracking, lines and zones, recordings
and snapshots): the store holds what the JSON lines hold, `pipeline store rebuild` gives
the same rows, a second run appends, a damaged file is moved aside and rebuilt, and
records the store could not keep are counted where a run's losses are."""
import glob
import logging
import os
import sqlite3
import subprocess
from collections import Counter

import pytest
import yaml

from conftest import detector_model, read_jsonl, run_pipeline
from pipeline.metrics.report import summary_table
from pipeline.runloop import exit_status
from pipeline.errors import FAILED

LINE = {"name": "path", "points": [[0, 300], [767, 250]], "classes": ["person"]}
LAWN = {"name": "lawn", "polygon": [[0, 330], [767, 280], [767, 575], [0, 575]], "classes": ["person"]}


def config(short_clips, model_path, **store) -> dict:
    return {"sources": [{"id": "campus", "uri": short_clips["vtest"]}, {"id": "street", "uri": short_clips["bikes"]}],
            "models": {"det": detector_model(model_path, score_threshold=0.1)},
            "graph": [{"detect": {"model": "det"}}, {"track": {"high_threshold": 0.4, "new_track_threshold": 0.5}},
                      {"analytics": {"cameras": {"campus": {"lines": [LINE], "zones": [LAWN]}}}}],
            "outputs": {"video": {"enabled": False, "segment_s": 3600}, "record": {"enabled": True},
                        "events": {"snapshots": True}, "jsonl": {"filename": "{camera}.jsonl"},
                        **({"store": store} if store else {})}}


def dump(path) -> dict:
    """Every table's rows without their ids (a track's zones and lines by its key)."""
    db = sqlite3.connect(path)
    key = "t.run, t.camera, t.track"
    return {
        "runs": db.execute("SELECT started, config, host FROM runs ORDER BY id").fetchall(),
        "tracks": db.execute("SELECT run, camera, track, class, first_seen, last_seen, best_score, best_box, best_time,"
                             " labels, zones, lines, snapshot, recording, recording_time FROM tracks"
                             " ORDER BY run, camera, track").fetchall(),
        "track_zones": db.execute(f"SELECT {key}, z.zone FROM track_zones z JOIN tracks t ON t.id = z.track_id"
                                  " ORDER BY 1, 2, 3, 4").fetchall(),
        "track_lines": db.execute(f"SELECT {key}, l.line, l.direction FROM track_lines l"
                                  " JOIN tracks t ON t.id = l.track_id ORDER BY 1, 2, 3, 4, 5").fetchall(),
        "events": db.execute("SELECT run, camera, time, event, track, class, line, zone, direction, snapshot, clip,"
                             " recording, recording_time FROM events ORDER BY 1, 2, 3, 4, 5, 7, 8").fetchall(),
        "segments": db.execute('SELECT camera, path, start, "end", bytes, motion_s, objects_s FROM segments'
                               " ORDER BY path").fetchall(),
        "counts": db.execute("SELECT * FROM counts ORDER BY 1, 2, 3, 4, 5, 6").fetchall(),
        "counts_hour": db.execute("SELECT * FROM counts_hour ORDER BY 1, 2, 3, 4, 5, 6").fetchall(),
    }


def lines_of(out) -> list[dict]:
    return [r for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))) for r in read_jsonl(path)]


def rebuild(pipeline_cmd, out, to) -> str:
    r = subprocess.run([*pipeline_cmd, "store", "rebuild", "--dir", str(out), "--to", str(to)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def one_run(short_clips, model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("store_run")

    def write(data, name="config.yaml"):  # `write_config` for a module's fixture
        (folder / name).write_text(yaml.safe_dump(data))
        return str(folder / name)

    snap = run_pipeline(config(short_clips, model_path), write, str(folder / "out"))
    return folder / "out", snap


def test_the_store_holds_what_the_json_lines_hold(one_run):
    out, snap = one_run
    rows, lines = dump(out / "store.db"), lines_of(out)
    tracked = {(r["camera"], d["track"]) for r in lines for d in r["detections"] if "track" in d}
    assert {(t[1], t[2]) for t in rows["tracks"]} == tracked and tracked
    events = [(r["camera"], e["event"], e["track"], e.get("line"), e.get("zone"), e.get("direction"))
              for r in lines for e in r.get("events", [])]
    assert Counter((e[1], e[3], e[4], e[6], e[7], e[8]) for e in rows["events"]) == Counter(events)
    assert any(e[1] == "cross" for e in events) and any(e[1] == "enter" for e in events)
    counted = Counter()
    for camera, _, kind, name, cls, direction, n in rows["counts"]:
        counted[(camera, name, direction)] += n
    crossings = Counter((c, line, d) for c, ev, _, line, _, d in events if ev == "cross")
    entries = Counter((c, zone, "enter") for c, ev, _, _, zone, _ in events if ev == "enter")
    assert counted == crossings + entries
    hours = Counter()
    for camera, minute, kind, name, cls, direction, n in rows["counts"]:
        hours[(camera, minute // 3600 * 3600, kind, name, cls, direction)] += n
    assert {r[:6]: r[6] for r in rows["counts_hour"]} == hours
    assert {s[1] for s in rows["segments"]} == {r["recording"] for r in lines if r.get("recording")}
    assert all(s[4] == os.path.getsize(out / s[1]) and s[6] > 0 for s in rows["segments"])
    assert any(t[12] is not None and os.path.exists(out / t[12]) for t in rows["tracks"])  # a snapshot
    assert all(c.store_lost == 0 for c in snap.cameras.values())


def test_a_rebuild_gives_the_same_rows_as_the_live_writer(one_run, pipeline_cmd, tmp_path):
    out, _ = one_run
    said = rebuild(pipeline_cmd, out, tmp_path / "rebuilt.db")
    assert "1 run(s)" in said
    assert dump(tmp_path / "rebuilt.db") == dump(out / "store.db")


def test_a_second_run_appends_and_a_damaged_store_is_moved_aside_and_rebuilt(
        short_clips, model_path, write_config, tmp_path, pipeline_cmd, caplog):
    out = tmp_path / "out"
    run_pipeline(config(short_clips, model_path), write_config, str(out))
    first = dump(out / "store.db")
    (out / "store.db").write_bytes(b"this is not a database" * 100)
    for side in ("store.db-wal", "store.db-shm"):
        if (out / side).exists():
            (out / side).unlink()
    with caplog.at_level(logging.ERROR, logger="pipeline.store"):
        run_pipeline(config(short_clips, model_path), write_config, str(out))
    said = [r.getMessage() for r in caplog.records if "moved aside" in r.getMessage()]
    assert len(said) == 1 and "store.db" in said[0], said
    (aside,) = glob.glob(str(out / "store.db.damaged-*"))
    assert open(aside, "rb").read().startswith(b"this is not a database")
    both = dump(out / "store.db")
    assert len(both["runs"]) == 2
    assert [t for t in both["tracks"] if t[0] == 1] == first["tracks"]  # the first run's rows, rebuilt
    assert {t[0] for t in both["tracks"]} == {1, 2}
    rebuild(pipeline_cmd, out, tmp_path / "rebuilt.db")
    assert dump(tmp_path / "rebuilt.db") == both


def test_records_the_store_could_not_keep_are_counted_in_the_summary_and_the_exit_status(
        short_clips, model_path, write_config, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    from pipeline.store.backend import open_sqlite
    backend = open_sqlite(str(out / "store.db"))
    backend.conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON tracks BEGIN SELECT RAISE(ABORT, 'no room'); END")
    backend.conn.commit()
    backend.close()
    snap = run_pipeline(config(short_clips, model_path, buffer_s=0.2, flush_s=0.1), write_config, str(out))
    lost = {cam: c.store_lost for cam, c in snap.cameras.items()}
    assert all(lost.values()), lost
    assert "store record(s)" in summary_table(snap)
    assert exit_status(snap, {}, interrupted=False) == FAILED


def test_a_store_on_a_disk_that_fills_up_never_stops_the_cameras_and_its_losses_are_counted(
        short_clips, model_path, write_config, tmp_path, small_disk, pipeline_cmd):
    disk = small_disk("1m")
    from pipeline.store.backend import open_sqlite
    open_sqlite(str(disk / "store.db")).close()  # the store made while there was room
    free = os.statvfs(disk)
    with open(disk / "filler", "wb") as f:  # room for the store to open and enter the run, not for its rows
        f.write(b"\0" * (free.f_bavail * free.f_frsize - 96 * 1024))
    out = tmp_path / "out"
    snap = run_pipeline(config(short_clips, model_path, path=str(disk / "store.db"), buffer_s=0.2, flush_s=0.1),
                        write_config, str(out))
    assert all(c.processed == 40 for c in snap.cameras.values())  # every frame went through
    assert sum(c.store_lost for c in snap.cameras.values()) and exit_status(snap, {}, False) == FAILED
    assert sqlite3.connect(disk / "store.db").execute("PRAGMA integrity_check").fetchone() == ("ok",)
    rebuild(pipeline_cmd, out, tmp_path / "rebuilt.db")  # the JSON lines hold what the store lost
    assert len(dump(tmp_path / "rebuilt.db")["tracks"]) > len(dump(disk / "store.db")["tracks"])
