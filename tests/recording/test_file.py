"""A recording on a disk that fills up: it stops at a keyframe while the disk still has
room for what it has queued, so its files end whole and no row names a picture the disk
could not take; a disk filled by another writer between two keyframes tears the file,
which is cut back to its last whole fragment, its rows from then on naming only what it
holds."""
from __future__ import annotations

import errno
import os

import av
import pytest

from pipeline.config import SourceConfig
from pipeline.recording.mp4 import whole_fragments_end
from pipeline.sources.connection import Connection
from synthetic import Mover, picture, render
from test_recorder import files, recording


def noisy(folder, frames: int, gop: int) -> str:
    """A clip that hardly compresses (sensor noise): a few hundred kB a second."""
    path = str(folder / f"noisy{gop}.mp4")
    render([Mover(picture("chelsea", 40), (0, 20), (100, 40))], path, frames=frames, size=(320, 240), fps=10,
           codec=("libx264", {"g": str(gop), "bf": "0", "preset": "ultrafast"}), noise=50)
    return path


def fill(disk, leave: int) -> None:
    """Another writer takes the disk's room but `leave` bytes (or all of it, where the
    recording took some meanwhile)."""
    st = os.statvfs(disk)
    try:
        with open(disk / "filler", "wb") as filler:
            filler.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    except OSError as e:
        assert e.errno == errno.ENOSPC


def record(disk, source: str, segment_s: float, fill_after: int | None = None):
    """The recording of `source` on `disk`, with each frame's spot as the analysis asks for
    it when the frame is decoded (a row), and again at the end. `fill_after`: after that
    many frames another writer takes all but 64 kB of the disk."""
    rec, failures = recording(disk, segment_s=segment_s)
    connection = Connection(SourceConfig(id="cam", uri=source), lambda why: None, tap=rec)
    rows = []
    try:
        for i, f in enumerate(connection.frames(lambda: False)):
            t = (f.pts + connection.link.offset) * connection.link.seconds  # as the camera's frames carry it
            rows.append((t, rec.spot(t)))
            if i == fill_after:
                fill(disk, 64 * 2**10)
    finally:
        connection.close()
        rec.close()
    return rec, failures, rows


def held(disk) -> dict[str, set[float]]:
    """The pictures each recording file holds (decoded: a torn file fails here)."""
    out = {}
    for path in files(disk):
        assert whole_fragments_end(path) == os.path.getsize(path), path  # nothing torn
        with av.open(path) as c:
            out[os.path.basename(path)] = {round(float(f.pts * f.time_base), 6) for f in c.decode(video=0)}
    return out


def assert_spots_hold(spots, pictures: dict[str, set[float]]) -> None:
    for t, spot in spots:
        assert spot is None or spot.time in pictures.get(spot.file, set()), (t, spot)


@pytest.mark.parametrize("size, gop, segment_s", [("2m", 10, 0), ("3m", 7, 1), ("1500k", 4, 1)])
def test_a_recording_stops_at_a_keyframe_before_its_disk_is_full(small_disk, tmp_path, size, gop, segment_s):
    disk = small_disk(size)
    source = noisy(tmp_path, 120, gop)
    rec, failures, rows = record(disk, source, segment_s)
    assert len(failures) == 1 and "its disk is nearly full" in rec.stats.error and rec.stats.state == "failed"
    pictures = held(disk)
    kept = sum(len(p) for p in pictures.values())
    assert kept > 0 and kept % gop == 0  # whole GOPs, up to the keyframe it stopped at
    assert_spots_hold(rows, pictures)  # no row named a picture the disk did not take
    assert sum(1 for _, spot in rows if spot is not None) == kept


@pytest.mark.parametrize("gop, fill_after", [(10, 25), (6, 13)])
def test_a_disk_filled_by_another_writer_leaves_whole_fragments_and_rows_naming_what_they_hold(
        small_disk, tmp_path, gop, fill_after):
    disk = small_disk("8m")
    source = noisy(tmp_path, 80, gop)
    rec, failures, rows = record(disk, source, 1, fill_after=fill_after)
    assert len(failures) == 1 and "cut to its last whole fragment" in rec.stats.error
    pictures = held(disk)
    assert 0 < sum(len(p) for p in pictures.values()) <= fill_after + gop
    assert_spots_hold([(t, rec.spot(t)) for t, _ in rows], pictures)  # rows from the failure on


def test_a_run_on_a_small_disk_keeps_its_rows_each_naming_a_picture_its_recording_holds(small_disk, tmp_path,
                                                                                       write_config):
    """A whole run (a file camera, its JSON lines and its recording on one small disk): the
    recording stops with room to spare, so the JSON lines go on to the end and every row
    that names a recording names a picture in it (before: the disk filled, the JSON lines
    failed with it and the last fragment was torn)."""
    import json

    from pipeline.config import load_config
    from pipeline.graph import Pipeline
    from recordings import null_detector

    disk = small_disk("3m")
    source = str(tmp_path / "noisy.mp4")
    render([Mover(picture("chelsea", 40), (0, 20), (100, 40))], source, frames=150, size=(320, 240), fps=10,
           codec=("libx264", {"g": "10", "bf": "2", "preset": "ultrafast"}), noise=50)
    cfg = {"sources": [{"id": "door", "uri": source}], "models": {"det": null_detector(tmp_path)},
           "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(disk), "video": {"enabled": False}, "jsonl": {"filename": "{camera}.jsonl"},
                       "record": {"enabled": True, "segment_s": 1}}}
    p = Pipeline(load_config(write_config(cfg)))
    p.start()
    assert p.wait(120)
    p.close()
    assert "its disk is nearly full" in p.snapshot().cameras["door"].recording.error
    with open(disk / "door.jsonl") as f:
        rows = [json.loads(line) for line in f]
    pictures = held(disk)
    named = [(row["recording"], row["recording_time"]) for row in rows if row["recording"] is not None]
    assert len(rows) == 150 and named
    assert all(t in pictures[os.path.basename(f)] for f, t in named)
