"""JSON lines are whole lines, whatever the disk does: a write a full disk cuts short is
cut back to the last whole line, and the lines that could not be written are counted.
A file run's lines depend on its files only: a shared file holds the file cameras' lines
in the order of their time whatever order they finish in, and their events carry no
wall-clock time; live cameras' lines are written as they come."""
import errno
import json
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from conftest import read_jsonl
from pipeline.config.outputs import JsonlOutputConfig
from pipeline.frames import ClassNames, Detections, Event, Frame
from pipeline.sinks.jsonl import JsonlFiles, JsonlWriter, frame_record


@pytest.mark.parametrize("flush_s", [0.0, 60.0], ids=["each-line", "batched"])
def test_a_full_disk_leaves_whole_lines_and_counts_the_lines_it_lost(small_disk, flush_s):
    disk = small_disk("64k")
    lost: Counter = Counter()
    writer = JsonlWriter(str(disk / "cam.0.jsonl"), flush_s, on_lost=lambda camera, n: lost.update({camera: n}))
    given = 0
    with pytest.raises(OSError) as e:
        for seq in range(10**5):
            given += 1
            writer.write({"camera": "cam", "seq": seq, "pad": "x" * (100 + seq % 37)})  # lines of many lengths
            if flush_s and seq % 50 == 49:
                writer.rotate(str(disk / f"cam.{seq + 1}.jsonl"))  # its 50 lines in one write
    assert e.value.errno == errno.ENOSPC
    seqs = []
    for path in sorted(disk.iterdir(), key=lambda p: int(p.name.split(".")[1])):
        data = path.read_bytes()
        assert not data or data.endswith(b"\n"), path
        seqs += [json.loads(line)["seq"] for line in data.splitlines()]
    assert seqs == list(range(len(seqs))) and len(seqs) + lost["cam"] == given


def record(cam: str, seq: int, rate: int = 10) -> dict:
    return {"camera": cam, "seq": seq, "time": seq / rate}


def shared_file(path: str, flush_s: float = 1.0) -> JsonlFiles:
    return JsonlFiles(JsonlOutputConfig(flush_s=flush_s), lambda cam, start: path,
                      lambda cam, file, lease=None: JsonlWriter(file, flush_s, lease))


def close(files: JsonlFiles, cam: str, last: bool) -> None:
    for writer in files.close(cam, last):
        writer.close()


def test_a_shared_file_holds_file_cameras_lines_in_time_order_whatever_order_they_finish_in(tmp_path):
    path = str(tmp_path / "detections.jsonl")
    files = shared_file(path)
    for cam in ("a", "b"):
        files.open(cam, None, None)
    arrivals = [("b", 0), ("b", 1), ("b", 2), ("a", 0), ("b", 3), ("a", 1), ("a", 2), ("a", 3), ("a", 4)]
    for cam, seq in arrivals:
        files.write(cam, None, record(cam, seq))
    close(files, "b", last=False)
    files.write("a", None, record("a", 5))
    close(files, "a", last=True)
    got = [(r["camera"], r["seq"]) for r in read_jsonl(path)]
    assert got == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3), ("a", 4),
                   ("a", 5)]


def test_a_live_cameras_lines_never_wait_for_the_others(tmp_path):
    path = str(tmp_path / "detections.jsonl")
    files = shared_file(path, flush_s=0.0)
    files.open("file", None, None)
    files.open("live", None, None, live=True)
    files.write("file", None, record("file", 0))
    for seq in range(3):
        files.write("live", None, record("live", seq))
    assert [r["camera"] for r in read_jsonl(path)] == ["file", "live", "live", "live"]
    close(files, "live", last=False)
    close(files, "file", last=True)


def test_a_file_cameras_events_carry_no_wall_clock_time_and_each_row_says_whether_the_detector_saw_it():
    det = Detections(np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.float32), np.array([0.9, 0.5], np.float32),
                     np.array([0, 0]), ClassNames(["person"]), predicted=np.array([False, True]))
    frame = Frame("a", 3, 3, Fraction(1, 10), None, 0.0, detections=det, detected=True)
    frame.events = [Event("a", 3, 3, 1, "person", "enter", zone="door", time=1700000000.0)]
    file_row, live_row = frame_record(frame, wall_time=False), frame_record(frame)
    assert "time" not in file_row["events"][0] and live_row["events"][0]["time"] == 1700000000.0
    assert file_row["detected"] is True and [d["predicted"] for d in file_row["detections"]] == [False, True]


@pytest.mark.parametrize("shared", [False, True], ids=["own-file", "shared-file"])
def test_a_file_already_there_is_appended_to_and_a_half_line_left_in_it_is_ended_first(tmp_path, caplog, shared):
    path = tmp_path / ("detections.jsonl" if shared else "cam.jsonl")
    earlier = [json.dumps(record("cam", seq)) for seq in range(7)]
    half = '{"camera":"cam","seq":7,"ti'  # an earlier run killed mid-line
    path.write_text("\n".join(earlier) + "\n" + half)
    files = shared_file(str(path)) if shared else JsonlFiles(
        JsonlOutputConfig(filename="{camera}.jsonl"), lambda cam, start: str(path),
        lambda cam, file, lease=None: JsonlWriter(file, 1.0, lease))
    files.open("cam", None, None)
    for seq in range(3):
        files.write("cam", None, record("cam", seq))
    with caplog.at_level("INFO", logger="pipeline.sink"):
        close(files, "cam", last=True)
    lines = path.read_text().split("\n")
    assert lines[:7] == earlier and lines[7] == half and lines[-1] == ""
    assert [json.loads(line)["seq"] for line in lines[8:-1]] == [0, 1, 2]
    assert [r.levelname for r in caplog.records if str(path) in r.getMessage()] == ["WARNING"]
