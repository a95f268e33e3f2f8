"""The store never has a file removed that is not one of its camera's recordings inside the
folder: a row naming one (an absolute path, `../x`, a link out, another camera's file, the
camera's video) is refused where rows are built (a rebuild from JSON lines, the live
writer), and a store written by hand or by an older version is checked again where
`recordings_kept` removes idle segments. Real files outside the folder must survive."""
import json
import logging
import os
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path

from pipeline.store.backend import open_sqlite
from pipeline.store.rows import Rows, SegmentRow
from pipeline.store.writer import Budget
from test_writer import frame, wait_for, writer

OLD = "gate.rec.20200101T000010Z.mp4"  # an idle old recording of the camera: the one file that may go
NOW = "gate.rec.20200101T000100Z.mp4"  # the camera's recording in the live run


def hostile(tmp_path) -> tuple[dict[str, str], dict[str, str], Path]:
    """The output folder `out` with OLD and NOW; names of files outside it (or not a path
    inside it) and of other files in it that must stay, each -> the file it reaches. Every
    file outside `out` is named like a recording of `gate`."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    for name in (OLD, NOW, "yard.rec.20200101T000003Z.mp4", "gate.20200101T000004Z.mp4",
                 "gate2.rec.20200101T000006Z.mp4"):
        (out / name).write_bytes(b"\0" * 100)
    for name in ("gate.rec.20200101T000000Z.mp4", "gate.rec.20200101T000002Z.mp4", "gate.rec.20200101T000005Z.mp4"):
        (outside / name).write_bytes(b"\0" * 100)
    (tmp_path / "gate.rec.20200101T000001Z.mp4").write_bytes(b"\0" * 100)
    os.symlink(outside / "gate.rec.20200101T000002Z.mp4", out / "gate.rec.20200101T000002Z.mp4")
    os.symlink(outside, out / "cams")
    names = {str(outside / "gate.rec.20200101T000000Z.mp4"): str(outside / "gate.rec.20200101T000000Z.mp4"),
             "../gate.rec.20200101T000001Z.mp4": str(tmp_path / "gate.rec.20200101T000001Z.mp4"),
             "gate.rec.20200101T000002Z.mp4": str(outside / "gate.rec.20200101T000002Z.mp4"),
             "cams/gate.rec.20200101T000005Z.mp4": str(outside / "gate.rec.20200101T000005Z.mp4"),
             "./gate.rec.20200101T000010Z.mp4": str(out / OLD)}
    later = {name: str(out / name) for name in ("yard.rec.20200101T000003Z.mp4", "gate.20200101T000004Z.mp4",
                                                 "gate2.rec.20200101T000006Z.mp4")}
    return names, later, out


def test_a_rebuild_refuses_json_lines_naming_files_outside_the_folder_or_of_another_camera(
        tmp_path, pipeline_cmd):
    names, _, out = hostile(tmp_path)
    named = [*names, "yard.rec.20200101T000003Z.mp4", OLD]
    with open(out / "detections.jsonl", "w") as f:
        for seq, path in enumerate(named):
            f.write(json.dumps(frame("gate", seq, recording=path, recording_time=0.0, t=seq * 10.0,
                                     events=[{"event": "enter", "zone": "lawn", "snapshot": path, "clip": path,
                                              "recording": path, "recording_time": 0.0}])) + "\n")
    r = subprocess.run([*pipeline_cmd, "store", "rebuild", "--dir", str(out), "--to", str(tmp_path / "store.db")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    db = sqlite3.connect(tmp_path / "store.db")
    assert db.execute("SELECT camera, path FROM segments").fetchall() == [("gate", OLD)]
    kept = {v for row in db.execute("SELECT snapshot, clip, recording FROM events") for v in row} - {None}
    assert kept == {OLD}  # never a snapshot or clip: OLD is not named as event files are
    for path in named[:-1]:
        assert any(path in line and "camera gate" in line and "refused" in line for line in r.stderr.splitlines())


def test_idle_segment_rows_naming_other_files_leave_them_and_the_live_writer_refuses_such_names(tmp_path, caplog):
    """A store written by hand: its rows name every file above as an idle segment of `gate`;
    `recordings_kept: motion` removes OLD alone and says why it leaves each other one."""
    names, later, out = hostile(tmp_path)
    backend = open_sqlite(str(out / "store.db"))
    backend.write(Rows(segments=[SegmentRow("gate", path, 1000.0 + i, 1001.0 + i, 100)
                                 for i, path in enumerate([*names, *later, OLD])]))
    backend.close()
    lost: Counter = Counter()
    w = writer(out, lost, flush_s=0.05, budget=Budget(activity="motion_s", idle_s=3600.0, every_s=0.1))
    with caplog.at_level(logging.WARNING, logger="pipeline.store"):
        w.start()
        w.offer(frame("gate", 0, recording=NOW, recording_time=0.0))
        w.offer(frame("yard", 0, recording="../gate.rec.20200101T000001Z.mp4", recording_time=0.0))
        wait_for(lambda: not (out / OLD).exists())
        time.sleep(0.3)  # sweeps after the one that removed OLD: they leave the rest too
        w.close()
    assert all(os.path.exists(target) for target in [*names.values(), *later.values()] if target != str(out / OLD))
    assert os.path.islink(out / "gate.rec.20200101T000002Z.mp4") and (out / NOW).exists()
    for path in [*names, *later]:
        assert sum(f"names {path}: not removed" in m for m in caplog.messages) == 1
    assert any("camera yard names recording ../gate.rec.20200101T000001Z.mp4: refused" in m for m in caplog.messages)
    db = sqlite3.connect(out / "store.db")
    assert OLD not in {p for p, in db.execute("SELECT path FROM segments")}
    assert ("yard",) not in db.execute("SELECT camera FROM segments").fetchall()
    assert not lost
