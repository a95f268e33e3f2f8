"""Time segments: a camera's video and JSON lines move to their next files together at the
first frame at or after each boundary, named by start time, each video starting on a
keyframe, no frame lost or written twice, timestamps going on; a resolution change is a
segment too; names only increase (nothing overwritten); a shared JSON lines file rotates
on the wall clock; retention never removes an open file."""
from __future__ import annotations

import time
from dataclasses import replace

import av
import pytest

from conftest import read_jsonl
from pipeline.config import ConfigError, parse_config
from pipeline.config.outputs import RetainConfig
from pipeline.metrics.registry import Metrics
from pipeline.sinks.camera_files import CameraOutputs
from pipeline.sinks.retention import OutputRetention
from pipeline.recording.segments import SegmentClock, segment_files, stamp
from segment_frames import frame, outputs_config, packets

STAMP = r"\d{8}T\d{6}Z"


def pairs(out) -> list[tuple[str, str]]:
    """(video, JSON lines) of each segment, in name order; both exist for each."""
    videos = segment_files(str(out / "cam.{start}.mp4"))
    lines = segment_files(str(out / "cam.{start}.jsonl"))
    assert [s for s, _ in videos] == [s for s, _ in lines]
    return [(v, j) for (_, v), (_, j) in zip(videos, lines)]


def test_a_file_camera_cuts_on_media_time_with_every_frame_once_and_keyframes_first(tmp_path):
    out = outputs_config(tmp_path, segment_s=1)
    files = CameraOutputs(out, Metrics())
    seen = []
    files.open("cam", live=False, on_packet=lambda packet, stream: seen.append(packet.pts))
    for seq in range(80):  # 3.2 s at 25 fps: segments of 25, 25, 25 and 5 frames
        files.write(frame(seq))
    current = files.metrics.camera("cam").segment
    files.close("cam", last=True)
    segments = pairs(tmp_path / "out")
    assert len(segments) == 4 and current == segments[-1][0].rsplit("/", 1)[1]
    seqs = []
    for video, lines in segments:
        held = packets(video)
        records = read_jsonl(lines)
        assert len(held) == len(records) and held[0].is_keyframe, video
        seqs += [r["seq"] for r in records]
    assert [len(packets(v)) for v, _ in segments] == [25, 25, 25, 5]
    assert seqs == list(range(80))  # none lost or repeated across the cuts
    assert sorted(seen) == [seq * 3600 for seq in range(80)]  # every packet of every segment, time going on


def test_a_resolution_change_starts_a_segment_of_both_outputs(tmp_path):
    out = outputs_config(tmp_path, segment_s=3600)
    files = CameraOutputs(out, Metrics())
    files.open("cam", live=False)  # media time: no wall-clock hour can cut it
    for seq in range(30):
        files.write(frame(seq, (48, 64) if seq < 12 else (72, 96)))
    files.close("cam", last=True)
    segments = pairs(tmp_path / "out")
    assert len(segments) == 2
    (v1, j1), (v2, j2) = segments
    assert len(packets(v1)) == len(read_jsonl(j1)) == 12 and len(packets(v2)) == len(read_jsonl(j2)) == 18
    with av.open(v2) as c:
        assert (c.streams.video[0].width, c.streams.video[0].height) == (96, 72)


def test_stamps_only_increase_so_a_returning_camera_never_overwrites(tmp_path):
    out = outputs_config(tmp_path, segment_s=3600)
    files = CameraOutputs(out, Metrics())
    for _ in range(3):  # the same id three times within one second
        files.open("cam", live=False)
        for seq in range(5):
            files.write(frame(seq))
        files.close("cam", last=True)
    segments = pairs(tmp_path / "out")
    assert len(segments) == 3 and all(len(read_jsonl(j)) == 5 for _, j in segments)


def test_the_clock_cuts_at_the_first_frame_at_or_after_a_boundary_and_only_forwards():
    clock = SegmentClock(10)
    assert clock.advance(3.0, 1_000_000_003.0) == stamp(1_000_000_003)
    assert clock.advance(9.99, 0) is None
    assert clock.advance(10.2, 1_000_000_010.2) == stamp(1_000_000_010)
    assert clock.advance(5.0, 1_000_000_011.0) is None  # a clock stepping back reopens nothing
    assert clock.restart(1_000_000_010.5) == stamp(1_000_000_011)  # same second: one later, never the same name


def test_a_shared_json_lines_file_rotates_on_the_wall_clock(tmp_path):
    out = outputs_config(tmp_path, segment_s=1)
    out.jsonl.filename = "detections.jsonl"
    files = CameraOutputs(out, Metrics())
    files.open("a", live=True)
    files.open("b", live=False)
    deadline = time.time() + 2.5
    seq = 0
    while time.time() < deadline:
        files.write(frame(seq, camera="a"))
        files.write(frame(seq, camera="b"))
        seq += 1
        time.sleep(0.05)
    files.close("a", last=False)
    files.close("b", last=True)
    shared = segment_files(str(tmp_path / "out" / "detections.{start}.jsonl"))
    assert len(shared) >= 2
    records = [r for _, path in shared for r in read_jsonl(path)]
    assert len(records) == 2 * seq and [r["seq"] for r in records if r["camera"] == "a"] == list(range(seq))


def test_retention_never_removes_the_segment_being_written(tmp_path):
    out = outputs_config(tmp_path, segment_s=1)
    files = CameraOutputs(out, Metrics())
    files.open("cam", live=False)
    for seq in range(60):
        files.write(frame(seq))
    retention = OutputRetention(replace(out, retain=RetainConfig(max_gb=1e-9)), files.is_open, Metrics(), files.index,
                                cameras=lambda: {"cam": None})
    removed = retention.parts[0].sweep()
    video, lines = files.video["cam"].file, files.jsonl.writers["cam"].path
    assert video not in removed and lines not in removed and len(removed) == 4  # 2 closed segments, 2 files each
    files.close("cam", last=True)
    assert len(read_jsonl(lines)) == 10 and len(packets(video)) == 10


def test_segment_and_retention_options_that_cannot_work_are_refused_by_name(tmp_path):
    for video, outputs, where in (({"segment_s": 0.5}, {}, "outputs.video.segment_s: must be 0 (off) or >= 1"),
                                  ({"filename": "{camera}.{end}.mp4"}, {}, "outputs.video.filename: unknown "
                                                                           "placeholder {end}"),
                                  ({}, {"retain": {"max_gb": -1}}, "outputs.retain.max_gb: must be > 0"),
                                  ({}, {"events": {"retain": {"max_days": 0}}}, "outputs.events.retain.max_days")):
        with pytest.raises(ConfigError) as e:
            data = {"sources": [{"id": "cam", "uri": "rtsp://127.0.0.1:1/x"}],
                    "models": {"det": {"path": __file__, "layout": "yolox", "input_size": 416}},
                    "graph": [{"detect": {"model": "det"}}],
                    "outputs": {"dir": str(tmp_path / "out"), "video": video, **outputs}}
            parse_config(data, tmp_path)
        assert any(p.startswith(where) for p in e.value.problems), e.value.problems


def test_a_start_placeholder_names_the_file_by_its_start_without_segments(tmp_path):
    out = outputs_config(tmp_path, segment_s=0, filename="{camera}/{start}.mp4")
    files = CameraOutputs(out, Metrics())
    files.open("cam", live=True)
    for seq in range(10):
        files.write(frame(seq))
    files.close("cam", last=True)
    videos = segment_files(str(tmp_path / "out" / "cam" / "{start}.mp4"))
    assert len(videos) == 1 and len(packets(videos[0][1])) == 10
