"""Recordings of live RTSP cameras against a real GStreamer RTSP server: a B-frame stream
recorded across segment cuts and a server restart (the pictures are the camera's,
timestamps rise, nothing lost at a cut), a camera that comes back in HEVC (a segment of
its own), and a sub-stream and a main stream that fail apart."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time

import av
import pytest

from conftest import read_jsonl
from pipeline.recording.segments import segment_files
from recordings import null_detector, segments
from synthetic import Mover, picture, render
from test_rtsp import SYSTEM_PYTHON, RtspServer, live_pipeline, server, wait_for  # noqa: F401 (the fixture)

pytestmark = pytest.mark.rtsp
FPS = 15
UNITS_SERVER = os.path.join(os.path.dirname(__file__), "..", "support", "rtsp_units_server.py")


def digest(frame) -> str:
    return hashlib.sha1(frame.to_ndarray(format="yuv420p").tobytes()).hexdigest()


def pictures(path: str) -> list[tuple[float, str]]:
    """(time in the file, picture digest) in display order."""
    with av.open(path) as c:
        return [(float(f.pts * f.time_base), digest(f)) for f in c.decode(video=0)]


def camera(uri: str, folder, **source) -> dict:
    return {"sources": [{"id": "door", "uri": uri, "reconnect": {"initial_s": 0.2, "max_s": 0.5}, **source}],
            "models": {"det": null_detector(folder)}, "graph": [{"detect": {"model": "det"}}],
            "outputs": {"dir": str(folder / "out"), "video": {"enabled": False},
                        "jsonl": {"filename": "{camera}.jsonl"}, "record": {"enabled": True, "segment_s": 1}}}


def rows_of(out: str) -> list[dict]:
    """The camera's JSON lines, all its segments in order (a live camera's are cut hourly)."""
    return [row for _, path in segment_files(os.path.join(out, "door.{start}.jsonl")) for row in read_jsonl(path)]


def assert_rows_point_at_pictures(out: str, rows: list[dict]) -> None:
    shown: dict[str, set[float]] = {}
    for row in rows:
        if row["recording"] is None:
            continue
        if row["recording"] not in shown:
            shown[row["recording"]] = {round(t, 6) for t, _ in pictures(os.path.join(out, row["recording"]))}
        assert row["recording_time"] in shown[row["recording"]], row


def test_a_b_frame_stream_is_recorded_across_cuts_and_a_server_restart(tmp_path, server, write_config):
    clip = str(tmp_path / "clip.mp4")
    render([Mover(picture("chelsea", 80), (0, 40), (200, 120))], clip, frames=6 * FPS, size=(320, 240), fps=FPS,
           codec=("libx264", {"bf": "2", "g": str(FPS), "preset": "veryfast"}))
    with av.open(clip) as c:
        index = {digest(f): i for i, f in enumerate(c.decode(video=0))}
    srv = server("--file", clip)
    p = live_pipeline(camera(srv.url, tmp_path), write_config)
    door = p.metrics.camera("door")
    try:
        wait_for(lambda: door.processed >= 2 * FPS, 30, "the camera to stream")
        srv.kill()
        wait_for(lambda: door.state == "reconnecting", 15, "the camera to notice")
        n = door.processed
        again = RtspServer("--file", clip).start(srv.port)
        try:
            wait_for(lambda: door.processed >= n + 2 * FPS, 30, "frames after the restart")
        finally:
            p.stop()
            assert p.wait(60)
            p.close()
            again.kill()
    finally:
        srv.kill()
    out = str(tmp_path / "out")
    files = segments(out, "door")
    assert len(files) >= 3
    sequence = []
    for path in files:
        shown = pictures(path)
        assert all(b[0] > a[0] for a, b in zip(shown, shown[1:])), path  # timestamps rise
        sequence += [index[d] for _, d in shown]  # every picture is one the camera sent
    jumps = [(a, b) for a, b in zip(sequence, sequence[1:]) if b < a]  # where the server began its file again
    # A picture skipped ahead is one the camera never got either (a loaded server drops
    # late frames; the stop can cut a mini-GOP): what the camera got is what is recorded.
    assert jumps, sequence
    snap = p.snapshot().cameras["door"]
    assert 0 <= len(sequence) - snap.frames_in <= 4  # nothing lost at the cuts (the camera stopped mid-GOP)
    assert snap.recording.gaps == snap.reconnects == len(jumps)
    assert_rows_point_at_pictures(out, rows_of(out))


def test_a_camera_back_in_hevc_continues_in_a_segment_of_its_own(tmp_path, server, write_config):
    srv = server("--size", "320x240")
    cfg = camera(srv.url, tmp_path)
    cfg["outputs"]["record"]["segment_s"] = 0
    p = live_pipeline(cfg, write_config)
    door = p.metrics.camera("door")
    try:
        wait_for(lambda: door.processed >= 10, 30, "the camera to stream")
        srv.kill()
        wait_for(lambda: door.state == "reconnecting", 15, "the camera to notice")
        n = door.processed
        hevc = RtspServer("--codec", "h265", "--size", "320x240").start(srv.port)
        try:
            wait_for(lambda: door.processed >= n + 10, 30, "HEVC frames")
        finally:
            p.stop()
            assert p.wait(60)
            p.close()
            hevc.kill()
    finally:
        srv.kill()
    out = str(tmp_path / "out")
    first, second = segments(out, "door")
    with av.open(first) as a, av.open(second) as b:
        assert (a.streams.video[0].codec_context.name, b.streams.video[0].codec_context.name) == ("h264", "hevc")
    assert len(pictures(second)) >= 10
    rows = rows_of(out)
    assert rows[-1]["recording"] == os.path.basename(second)
    assert_rows_point_at_pictures(out, rows)


def test_a_sub_stream_and_a_main_stream_fail_apart(tmp_path, server, write_config):
    """The sub-stream dies: the recording goes on; the main stream dies: the analysis goes
    on, its rows in no file until the main stream is back (a gap, counted)."""
    main, sub = server("--size", "320x240"), server("--size", "160x120")
    cfg = camera(main.url, tmp_path, detect_uri=sub.url)
    cfg["outputs"]["record"]["segment_s"] = 0
    p = live_pipeline(cfg, write_config)
    door = p.metrics.camera("door")
    restarted: list[RtspServer] = []
    try:
        wait_for(lambda: door.processed >= 10, 30, "the camera to stream")
        rec = door.recording
        assert rec is not None
        sub.kill()
        wait_for(lambda: door.state == "reconnecting", 15, "the analysis to notice")
        written = rec.bytes
        wait_for(lambda: rec.bytes > written + 10_000, 15, "the recording to go on")
        restarted.append(RtspServer("--size", "160x120").start(sub.port))
        wait_for(lambda: door.state == "streaming", 30, "the sub-stream to come back")
        main.kill()
        wait_for(lambda: rec.state == "reconnecting", 15, "the recording to notice")
        n = door.processed
        wait_for(lambda: door.processed >= n + 10, 15, "the analysis to go on")
        restarted.append(RtspServer("--size", "320x240").start(main.port))
        wait_for(lambda: rec.state == "recording", 30, "the main stream to come back")
        time.sleep(0.5)
    finally:
        p.stop()
        p.wait(60)
        p.close()
        for s in restarted:
            s.kill()
    snap = p.snapshot().cameras["door"]
    assert snap.recording.gaps >= 1 and snap.reconnects >= 1 and not snap.output_errors  # one each, more if loaded
    out = str(tmp_path / "out")
    (only,) = segments(out, "door")
    with av.open(only) as c:
        assert c.streams.video[0].width == 320  # the main stream's pictures, never decoded by the analysis
        end = float(c.streams.video[0].duration * c.streams.video[0].time_base) if c.streams.video[0].duration \
            else max(t for t, _ in pictures(only))
    rows = rows_of(out)
    placed = [r for r in rows if r["recording"] is not None]
    assert len(placed) >= 10 and len(rows) - len(placed) >= 5  # the rows while the main stream was away
    assert all(0 <= r["recording_time"] <= end + 0.5 for r in placed)


def units_from(clip: str, folder, start_s: float, fps: int) -> str:
    """The clip's access units for `rtsp_units_server.py`, the camera's clock starting at
    `start_s`, sent at `fps` from half a second after a client plays."""
    table = []
    with av.open(clip) as c, open(folder / "units.h264", "wb") as out:
        annexb = av.BitStreamFilterContext("h264_mp4toannexb", c.streams.video[0])
        for p in c.demux(video=0):
            for q in annexb.filter(p if p.size else None):
                out.write(bytes(q))
                table.append([q.size, float(q.pts * q.time_base) + start_s, float(q.dts * q.time_base) + start_s,
                              bool(q.is_keyframe), 0.5 + len(table) / fps])
    (folder / "units.json").write_text(json.dumps(table))
    return str(folder)


@pytest.mark.parametrize("start_s, size", [(10.0, (192, 96)), (6.5, (176, 144))])
def test_a_camera_ffmpeg_opens_as_0x0_is_recorded_and_decides_for_no_camera_beside_it(tmp_path, server, write_config,
                                                                                       start_s, size):
    """A camera whose clock starts late (the probe ends before its first picture: FFmpeg
    opens it as 0x0) records at its keyframe's size, and the healthy H.264 camera planned
    after it records too (one camera's stream was refused for both)."""
    clip = str(tmp_path / "odd.mp4")
    render([Mover(picture("chelsea", 40), (0, 10), (120, 40))], clip, frames=6 * FPS, size=size, fps=FPS,
           codec=("libx264", {"bf": "0", "g": str(FPS), "tune": "zerolatency"}))
    units = tmp_path / "units"
    units.mkdir()
    odd = subprocess.Popen([SYSTEM_PYTHON, UNITS_SERVER, "--units", units_from(clip, units, start_s, FPS)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = odd.stdout.readline().strip()  # type: ignore[union-attr]
        assert url.startswith("rtsp://"), odd.stderr.read()  # type: ignore[union-attr]
        healthy = server("--size", "160x120")
        cfg = camera(url, tmp_path)
        cfg["sources"].append({**cfg["sources"][0], "id": "yard", "uri": healthy.url})
        p = live_pipeline(cfg, write_config)
        try:
            wait_for(lambda: min(p.metrics.camera(c).processed for c in ("door", "yard")) >= 3 * FPS, 30,
                     "both cameras to stream")
        finally:
            p.stop()
            assert p.wait(60)
            p.close()
    finally:
        odd.kill()
        odd.wait(10)
    out = str(tmp_path / "out")
    for cam, (w, h) in (("door", size), ("yard", (160, 120))):
        files = segments(out, cam)
        assert files and not p.snapshot().cameras[cam].recording.error
        for path in files:
            with av.open(path) as c:
                assert {(f.width, f.height) for f in c.decode(video=0)} == {(w, h)}
    assert_rows_point_at_pictures(out, rows_of(out))
