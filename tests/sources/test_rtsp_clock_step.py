"""A live camera whose clock steps back, served by a real RTSP server that sends
pre-encoded access units with the timestamps the test chose: the analysis' timeline and
the recording go on at the camera's own pace (its rate as measured, not as declared),
bridged by one frame interval at the step, the pts-dts gap of every file the camera's
own B-frame delay, every row pointing at its picture."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess

import av
import numpy as np
import pytest

from conftest import read_jsonl
from pipeline.recording.segments import segment_files
from recordings import null_detector, segments, times
from synthetic import Mover, picture, render
from test_rtsp import _MISSING, SYSTEM_PYTHON, live_pipeline, wait_for

pytestmark = [pytest.mark.rtsp, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]


UNITS_SERVER = os.path.join(os.path.dirname(__file__), "..", "support", "rtsp_units_server.py")


def made(folder, fps: int, frames: int, **options: str) -> str:
    path = str(folder / "made.mp4")
    render([Mover(picture("chelsea", 40), (0, 10), (150, 50))], path, frames=frames, size=(192, 96), fps=fps,
           codec=("libx264", {"preset": "veryfast", **options}))
    return path


def write_units(folder, sent_fps: int, declared_fps: int, frames: int, back_s: float, at: int, **options: str) -> str:
    """A clip encoded at `declared_fps`, its access units sent at `sent_fps` with the
    camera's clock (starting at 10 s) set back `back_s` from the picture filmed `at`
    on (the pictures filmed before it keep their times, whenever they are sent)."""
    clip = made(folder, declared_fps, frames, **options)
    table = []
    with av.open(clip) as c, open(folder / "units.h264", "wb") as out:
        annexb = av.BitStreamFilterContext("h264_mp4toannexb", c.streams.video[0])
        for p in c.demux(video=0):
            for q in annexb.filter(p if p.size else None):
                filmed = float(q.pts * q.time_base) * declared_fps / sent_fps
                decoded = float(q.dts * q.time_base) * declared_fps / sent_fps
                shift = 10.0 - (back_s if filmed >= at / sent_fps else 0.0)
                out.write(bytes(q))
                table.append([q.size, filmed + shift, decoded + shift, bool(q.is_keyframe), 0.5 + len(table) / sent_fps])
    (folder / "units.json").write_text(json.dumps(table))
    return str(folder)


@contextlib.contextmanager
def units_server(folder: str):
    proc = subprocess.Popen([SYSTEM_PYTHON, UNITS_SERVER, "--units", folder], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert url.startswith("rtsp://"), proc.stderr.read()  # type: ignore[union-attr]
        yield url
    finally:
        proc.kill()
        proc.wait(10)


START = 16  # rows not judged: the stream's start, where FFmpeg's RTSP demuxer gives no decode times or wrong ones
STEPS = {  # sent fps, declared fps, frames, back (s), at unit, encoder options
    "3 s back, 10 fps sent, 25 declared": (10, 25, 110, 3.0, 40, {"bf": "0", "g": "10", "tune": "zerolatency"}),
    "1.3 s back, B-frames, 15 fps": (15, 15, 120, 1.3, 52, {"bf": "2", "g": "15", "b-adapt": "0"}),
    "2 s back, B-pyramid, 12 fps": (12, 12, 110, 2.0, 50, {"bf": "3", "g": "12"}),
}


@pytest.mark.parametrize("record", [True, False], ids=["recorded", "not recorded"])
@pytest.mark.parametrize("kind", STEPS)
def test_a_live_cameras_clock_stepping_back_is_bridged_by_a_frame_and_its_own_timestamps_go_on(
        tmp_path, write_config, kind, record):
    sent, declared, frames, back, at, options = STEPS[kind]
    out = str(tmp_path / "out")
    cfg = {"sources": [{"id": "door", "uri": "", "reconnect": {"initial_s": 60, "max_s": 60}}],
           "models": {"det": null_detector(tmp_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": out, "video": {"enabled": False}, "jsonl": {"filename": "{camera}.jsonl"},
                       "record": {"enabled": record, "segment_s": 2}}}
    with units_server(write_units(tmp_path, sent, declared, frames, back, at, **options)) as url:
        cfg["sources"][0]["uri"] = url
        p = live_pipeline(cfg, write_config)
        door = p.metrics.camera("door")
        try:
            wait_for(lambda: door.processed and door.state == "reconnecting", 60, "the end of the camera's stream")
        finally:
            p.stop()
            assert p.wait(60)
            p.close()
    rows = [r for _, path in sorted(segment_files(os.path.join(out, "door.{start}.jsonl")))
            for r in read_jsonl(path)]
    start = rows[:START]  # a B-frame stream's first packets over RTSP: FFmpeg learns their decode delay
    rows = rows[START:]
    interval = 1 / sent
    gaps = np.diff([r["time"] for r in rows]) / interval  # in frame intervals: a frame each, any dropped ones
    # at the step a B-frame stream's first picture is placed its reorder delay later (it may
    # be shown after the pictures coded next): a gap of up to two intervals there, once
    bridge = 2.0 if int(options.get("bf", "0")) > 0 else 1.5
    odd = [(a["seq"], b["seq"], round(g, 2)) for a, b, g in zip(rows, rows[1:], gaps)
           if not 0.5 < g < (bridge if abs(b["seq"] - at) <= 1 else 1.5) * (b["seq"] - a["seq"])]
    # no squeeze, no jump (a frame dropped on a loaded machine: its interval too)
    assert len(start + rows) >= frames // 2 and not odd, odd
    if not record:
        return
    files = segments(out, "door")
    assert len(files) >= 3
    for path in files[1:]:  # the first holds the stream's start
        with av.open(path) as c:
            stamped = [(p.pts, p.dts) for p in c.demux(video=0) if p.size]
            tb = c.streams.video[0].time_base
        lead = [float((pts - dts) * tb) for pts, dts in stamped]
        bframes = int(options["bf"])
        # the B-frames' delay (once, at the step, with the bridge's), never growing
        assert max(lead) <= (2 * bframes + 1.5) * interval, (path, lead)
        shown = times(path)
        assert float(shown[0]) <= (2 * bframes + 1.5) * interval and all(b > a for a, b in zip(shown, shown[1:]))
        assert max(np.diff([float(t) for t in shown])) < 4 * interval
    by_file = {os.path.relpath(f, out): {round(float(t), 6) for t in times(f)} for f in files}
    placed = [r for r in rows if r["recording"] is not None]
    assert len(placed) >= len(rows) - 10 and all(r["recording_time"] in by_file[r["recording"]] for r in placed)
