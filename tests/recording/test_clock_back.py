"""A wall clock set back between two runs (an hour ahead, then put right): each recording
is named by its true start, so its name and its store row tell the same time, and an
export by the row's range or by the name's returns that file's own packets; a name
taken in its second gets a suffix that every reader of names parses in order."""
from __future__ import annotations

import os
import re
import sqlite3
import time

from conftest import run_pipeline
from pipeline.recording.export import export, pieces_of
from pipeline.recording.segments import TrueStampClock, last_stamp, segment_files, stamp, stamp_seconds
from pipeline.sinks.retention import template_names
from pipeline.web.recordings import name_pattern
from recordings import null_detector, packets
from test_recorder import clip

AHEAD_S = 3600


def segment_rows(db) -> list[tuple[str, float, float]]:
    with sqlite3.connect(str(db)) as conn:
        return conn.execute('SELECT path, start, "end" FROM segments ORDER BY start').fetchall()


def test_after_the_clock_went_back_names_rows_and_exports_agree(tmp_path, write_config, monkeypatch):
    # a keyframe a second, as cameras send at least: a file lies at its stamp's whole second, so
    # an export from its row's start (that second plus a fraction) starts at its first keyframe
    # only where the next one comes a second or more after it
    source = clip(tmp_path, "v.mp4", frames=20, g="10")
    out = tmp_path / "out"
    cfg = {"sources": [{"id": "cam", "uri": source}], "models": {"det": null_detector(tmp_path)},
           "graph": [{"detect": {"model": "det"}}],
           "outputs": {"video": {"enabled": False}, "record": {"enabled": True}}}
    real = time.time
    with monkeypatch.context() as m:
        m.setattr(time, "time", lambda: real() + AHEAD_S)  # the first run's clock is an hour ahead
        run_pipeline(dict(cfg), write_config, str(out))
    began = real()
    run_pipeline(dict(cfg), write_config, str(out))  # put right: the clock went back an hour
    files = segment_files(str(out / "cam.rec.{start}.mp4"))
    rows = segment_rows(out / "store.db")
    assert len(files) == len(rows) == 2
    named = {os.path.relpath(path, out): stamp_seconds(s) for s, path in files}
    for path, start, _ in rows:
        assert abs(named[path] - start) < 1.5, (path, start)  # the name says when the file begins
    assert began - 1 <= min(named.values()) < began + 60  # the second run's: its own time, not after the first's
    pieces = pieces_of(files)  # what `pipeline export` and /api/export read
    for i, (path, start, end) in enumerate(rows):
        own = [p for p, _ in packets(str(out / path))]
        for j, since in enumerate((start, named[path])):  # the store row's range, the name's
            made = export("cam", pieces, since, end + 1, str(tmp_path / f"e{i}{j}.mp4"), 3600)
            assert [p for p, _ in packets(made.path)] == own, path


def test_a_name_taken_in_its_second_gets_a_suffix_that_every_reader_parses_in_order(tmp_path):
    t = 1_800_000_000.4
    for name in (stamp(t), f"{stamp(t)}-1"):  # an earlier run's files of that second
        (tmp_path / f"cam.rec.{name}.mp4").write_bytes(b"")
    clock = TrueStampClock(None, lambda name: (tmp_path / f"cam.rec.{name}.mp4").exists())
    given = [clock.restart(t) for _ in range(9)] + [clock.restart(t - 5)]
    assert given == [f"{stamp(t)}-{n}" for n in range(2, 11)] + [stamp(t - 5)]  # never the same name, never a later second
    for name in given:
        (tmp_path / f"cam.rec.{name}.mp4").write_bytes(b"")
    found = segment_files(str(tmp_path / "cam.rec.{start}.mp4"))
    assert [s for s, _ in found] == [stamp(t - 5), stamp(t)] + [f"{stamp(t)}-{n}" for n in range(1, 11)]
    assert last_stamp(str(tmp_path / "cam.rec.{start}.mp4")) == f"{stamp(t)}-10"
    assert [p.path for p in pieces_of(found)] == [path for _, path in found]
    assert {p.start for p in pieces_of(found)[1:]} == {int(t)}
    name = f"cam.rec.{stamp(t)}-10.mp4"
    assert name_pattern("{camera}.rec.{start}.mp4").fullmatch(name).group("start") == f"{stamp(t)}-10"
    assert re.fullmatch(template_names("{camera}.rec.{start}.mp4", "cam"), name)
