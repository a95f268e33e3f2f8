"""The run's record of what it wrote (`.written`) is read by retention on every sweep: a
record hand-edited, corrupted or replaced by something else must never stop retention
nor make it remove a file the record does not soundly name."""
import json
import os

from pipeline.sinks.written import INDEX, WrittenIndex
from test_retention import make, retention


def test_a_corrupt_record_line_is_skipped_and_the_sound_ones_still_count(tmp_path):
    index = WrittenIndex(str(tmp_path))
    old = make(tmp_path / "cam.20200101T000000Z.mp4", 100, 900, index)
    with open(tmp_path / INDEX, "ab") as f:
        f.write(b"[" * 10_000 + b"\n")  # nested past the JSON decoder's recursion limit
        f.write(json.dumps({"camera": "cam", "path": "cam.20200101T000001Z.mp4\u0000"}).encode() + b"\n")
        f.write(json.dumps({"camera": "cam", "path": "events/cam/20200101T000000.000Z_1_0_a\u0000.crop.jpg"}).encode()
                + b"\n")
    make(tmp_path / "cam.20200101T000100Z.mp4", 100, 800, index)
    run, _ = retention(tmp_path, retain={"max_gb": 1e-9}, events={"retain": {"max_gb": 1e-9}})
    assert [part.sweep() for part in run.parts] == [[old], []]


def test_a_record_that_cannot_be_read_removes_nothing_and_retention_goes_on(tmp_path, caplog):
    make(tmp_path / "cam.20200101T000000Z.mp4", 100, 900)
    os.mkdir(tmp_path / INDEX)  # something else took the record's name
    run, _ = retention(tmp_path, retain={"max_gb": 1e-9})
    assert run.parts[0].sweep() == [] and run.parts[0].sweep() == []
    assert os.path.exists(tmp_path / "cam.20200101T000000Z.mp4")
    assert sum(INDEX in r.getMessage() for r in caplog.records) == 1  # said once, not every sweep


def test_a_file_under_an_events_folder_that_leads_outside_stays(tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    theirs = make(outside / "cam" / "20200101T000000.000Z_1.jpg", 100, 900)
    out.mkdir()
    os.symlink(outside, out / "events")
    WrittenIndex(str(out)).add("cam", str(out / "events" / "cam" / "20200101T000000.000Z_1.jpg"))
    run, _ = retention(out, events={"retain": {"max_gb": 1e-9}})
    assert run.parts[0].sweep() == [] and os.path.exists(theirs)
