"""A camera's recording on real clips, fed by real connections: H.264 and HEVC packets
copied byte for byte, a file's passes on one timeline, a codec change in a segment of its
own, timestamps made where a stream has none (or only a pts at first, as RTSP's B-frame
streams), a full queue dropping up to the next keyframe, audio copied where the container
holds it and left out (said once) where it does not."""
from __future__ import annotations

import logging
import os
import threading
from fractions import Fraction

import av
import numpy as np
import pytest

from pipeline.config import SourceConfig
from pipeline.config.outputs import RecordConfig
from pipeline.recording.recorder import Recording
from pipeline.recording.segment_plan import Link
from pipeline.sources.connection import Connection
from recordings import packets, times
from synthetic import Mover, picture, render

FPS = 10
B_FRAMES = {"bf": "2", "g": "5", "preset": "ultrafast"}
X265 = {"x265-params": "log-level=error:open-gop=0"}  # cameras' HEVC: closed GOPs


def clip(folder, name: str, codec: str = "libx264", size=(160, 96), frames: int = 20, **options) -> str:
    path = str(folder / name)
    render([Mover(picture("chelsea", 40), (0, 20), (100, 40))], path, frames=frames, size=size, fps=FPS,
           codec=(codec, {**B_FRAMES, **options}))
    return path


def recording(out, **config) -> tuple[Recording, list[BaseException]]:
    failures: list[BaseException] = []
    cfg = RecordConfig(enabled=True, **config)
    rec = Recording("cam", str(out), cfg, cfg.segment_s or None, False,
                    path=lambda stamp: os.path.join(str(out), f"cam.rec.{stamp}{os.path.splitext(cfg.filename)[1]}"),
                    on_failure=failures.append)
    return rec, failures


def play(rec: Recording, *uris: str) -> int:
    """Each file as one connection of a camera (a file's passes, a camera that came back),
    decoded as the camera decodes it; the frames decoded."""
    decoded = 0
    for uri in uris:
        connection = Connection(SourceConfig(id="cam", uri=uri), lambda why: None, tap=rec)
        try:
            decoded += sum(1 for _ in connection.frames(lambda: False))
        finally:
            connection.close()
    rec.close()
    return decoded


def files(out) -> list[str]:
    return sorted(os.path.join(str(out), f) for f in os.listdir(str(out)) if ".rec." in f)


@pytest.mark.parametrize("codec", ["libx264", "libx265"])
def test_h264_and_hevc_packets_are_copied_byte_for_byte_in_keyframe_cut_segments(tmp_path, codec):
    source = clip(tmp_path, f"{codec}.mp4", codec, **(X265 if codec == "libx265" else {}))
    rec, failures = recording(tmp_path / "out", segment_s=1)
    assert play(rec, source) == 20
    written = [packets(f) for f in files(tmp_path / "out")]
    assert [p for seg in written for p in seg] == packets(source) and not failures
    assert len(written) == 2 and all(seg[0][1] for seg in written)
    with av.open(files(tmp_path / "out")[1]) as c:
        assert c.streams.video[0].codec_context.name == ("h264" if codec == "libx264" else "hevc")


def test_a_files_passes_go_on_one_timeline_in_one_segment(tmp_path):
    source = clip(tmp_path, "a.mp4")
    rec, _ = recording(tmp_path / "out")
    play(rec, source, source)
    (only,) = files(tmp_path / "out")
    shown = times(only)
    assert len(shown) == 40 and all(b - a == Fraction(1, FPS) for a, b in zip(shown, shown[1:]))
    assert packets(only) == packets(source) * 2


def test_a_codec_change_starts_a_segment_of_its_own(tmp_path):
    h264, hevc = clip(tmp_path, "a.mp4"), clip(tmp_path, "b.mp4", "libx265", size=(192, 128), **X265)
    rec, failures = recording(tmp_path / "out")
    play(rec, h264, hevc)
    first, second = files(tmp_path / "out")
    with av.open(first) as a, av.open(second) as b:
        assert [(s.codec_context.name, s.width) for s in (a.streams.video[0], b.streams.video[0])] == \
            [("h264", 160), ("hevc", 192)]
    assert packets(first) == packets(h264) and packets(second) == packets(hevc) and not failures
    assert rec.stats.segments == 2


def test_a_stream_without_timestamps_is_timed_by_the_frame_rate_for_frames_and_recording_alike(tmp_path, caplog):
    raw = str(tmp_path / "raw.h264")  # an elementary stream: no timestamps at all
    with av.open(clip(tmp_path, "a.mp4", bf="0")) as src, av.open(raw, "w", format="h264") as dst:
        out = dst.add_stream_from_template(src.streams.video[0])
        for p in src.demux(video=0):
            if p.size:
                p.stream = out
                dst.mux(p)
    rec, failures = recording(tmp_path / "out")
    connection = Connection(SourceConfig(id="cam", uri=raw), lambda why: None, tap=rec)
    with caplog.at_level(logging.WARNING, "pipeline.recording"):
        decoded = [f.pts for f in connection.frames(lambda: False)]
        connection.close()
        rec.close()
    (only,) = files(tmp_path / "out")
    shown = times(only)
    assert len(shown) == 20 and all(b - a == Fraction(1, FPS) for a, b in zip(shown, shown[1:])) and not failures
    assert decoded[1:] == sorted(decoded[1:]) and decoded[2] - decoded[1] == connection.link.step  # frames agree
    assert sum("timed by the frame rate" in r.message for r in caplog.records) == 1


class SentPacket:
    """A packet's timestamps as a demuxer hands them over (only they matter here)."""

    def __init__(self, pts, dts):
        self.pts, self.dts = pts, dts


def test_an_rtsp_b_frame_streams_first_packets_get_decode_times_counted_back(tmp_path):
    """As GStreamer's RTSP server sends x264's B-frames: the first packets have a pts but
    no dts yet (the demuxer learns the delay from them); they wait, then get the decode
    times before the first one known, and the keyframe a pts one frame before the
    earliest picture after it."""
    with av.open(clip(tmp_path, "a.mp4")) as c:
        link = Link(c.streams.video[0], None, Fraction(FPS))
    link.step = 6000
    sent = [(None, None), (18000, None), (6000, None), (12000, 6000), (36000, 12000)]
    ready = []
    for pts, dts in sent:
        packet = SentPacket(pts, dts)
        ready += link.repair(packet) if link.held or pts is None or dts is None else [(packet, pts, dts)]
    assert [(pts, dts) for _, pts, dts in ready] == [(0, -12000), (18000, -6000), (6000, 0), (12000, 6000),
                                                       (36000, 12000)]
    assert [(p.pts, p.dts) for p, _, _ in ready[:3]] == [(0, -12000), (18000, -6000), (6000, 0)]


def test_a_full_queue_drops_up_to_the_next_keyframe_and_the_recording_plays_on(tmp_path, caplog):
    """The writer is stuck (a slow disk) while the camera reads on: the camera never waits,
    packets are dropped up to the first keyframe the queue has room for, counted, and the
    recording goes on from there, every picture decodable; frames in the hole are in no file."""
    source = clip(tmp_path, "a.mp4", frames=30, bf="0")  # a keyframe every 5 packets
    rec, failures = recording(tmp_path / "out", queue=3)
    writing, stuck = threading.Event(), threading.Event()
    rec.on_video = lambda held, stream: (writing.set(), stuck.wait(10))  # the writer waits on its first packet
    with av.open(source) as c:
        sent_packets = [p for p in c.demux(video=0) if p.size]
        link = rec.connect(c.streams.video[0], None, Fraction(FPS))
        with caplog.at_level(logging.WARNING, "pipeline.recording"):
            rec.packet(sent_packets[0], link)
            assert writing.wait(10)
            for p in sent_packets[1:12]:
                rec.packet(p, link)
            stuck.set()
            for p in sent_packets[12:]:  # the disk keeps up again (a packet a frame's decode apart)
                while not rec._queue.empty():
                    threading.Event().wait(0.005)
                rec.packet(p, link)
        rec.close()
    (only,) = files(tmp_path / "out")
    got, sent = packets(only), packets(source)
    assert got == sent[:4] + sent[15:] and not failures  # 4 written or queued; on from the keyframe at 15
    assert rec.stats.dropped == 11 and rec.stats.gaps == 1
    assert sum(1 for _ in av.open(only).decode(video=0)) == len(got)
    hole = rec.plan.segments[0].holes[0]
    assert rec.spot(hole[0]) is None and rec.spot(hole[1]) is not None
    assert sum("fell behind" in r.message for r in caplog.records) == 1


def with_audio(video: str, path: str, codec: str) -> str:
    """The clip with a second of tone in `codec` beside its video."""
    rate = 16000
    with av.open(video) as src, av.open(path, "w") as dst:
        v = dst.add_stream_from_template(src.streams.video[0])
        a = dst.add_stream(codec, rate=rate, layout="mono")  # type: ignore[call-overload]
        fmt = a.codec_context.codec.audio_formats[0].name
        for p in src.demux(video=0):
            if p.size:
                p.stream = v
                dst.mux(p)
        for i in range(rate // 1024):
            tone = (np.sin(np.arange(i * 1024, (i + 1) * 1024) * 0.05) * 8000)[None]
            frame = av.AudioFrame.from_ndarray(tone.astype("int16" if fmt.startswith("s16") else "float32"),
                                               format=fmt, layout="mono")
            frame.sample_rate, frame.pts = rate, i * 1024
            for q in a.encode(frame):
                dst.mux(q)
        for q in a.encode(None):
            dst.mux(q)
    return path


def test_audio_is_copied_where_the_container_holds_it(tmp_path):
    source = with_audio(clip(tmp_path, "v.mp4"), str(tmp_path / "av.mp4"), "aac")
    rec, failures = recording(tmp_path / "out")
    play(rec, source)
    (only,) = files(tmp_path / "out")
    assert packets(only) == packets(source) and not failures
    assert packets(only, "audio") == packets(source, "audio") and rec.stats.audio == "copied"


def test_audio_the_container_cannot_hold_is_left_out_and_said_once(tmp_path, caplog):
    """G.711 (a camera's usual audio) fits in MOV, not in MP4: an MP4 recording goes on
    without it and says so once, naming the container that would keep it."""
    source = with_audio(clip(tmp_path, "v.mp4"), str(tmp_path / "ulaw.mov"), "pcm_mulaw")
    rec, failures = recording(tmp_path / "out", segment_s=1)
    with caplog.at_level(logging.WARNING, "pipeline.recording"):
        play(rec, source)
    assert len(files(tmp_path / "out")) == 2 and not failures
    for path in files(tmp_path / "out"):
        with av.open(path) as c:
            assert not c.streams.audio
    assert rec.stats.audio.startswith("left out") and "pcm_mulaw" in rec.stats.audio
    said = [r.message for r in caplog.records if "audio" in r.message]
    assert len(said) == 1 and "record to .mov to keep it" in said[0]
    mov, _ = recording(tmp_path / "mov", filename="{camera}.rec.{start}.mov")
    play(mov, source)
    assert packets(files(tmp_path / "mov")[0], "audio") == packets(source, "audio")
    mkv, _ = recording(tmp_path / "mkv", filename="{camera}.rec.{start}.mkv")  # as the reference says: .mov only
    play(mkv, source)
    assert mkv.stats.audio.startswith("left out: the .mkv container cannot hold pcm_mulaw")


def outputs_of(outputs):
    """The cameras of a run's outputs with their recordings' names, as the graph tells retention."""
    return lambda: {cam: outputs.record_names.get(cam) for cam in outputs.ran}


def test_retention_removes_finished_recordings_never_the_one_being_written(tmp_path):
    from pipeline.config import OutputsConfig
    from pipeline.config.outputs import RetainConfig
    from pipeline.metrics.registry import Metrics
    from pipeline.sinks.camera_files import CameraOutputs
    from pipeline.sinks.retention import OutputRetention

    out = tmp_path / "out"
    config = OutputsConfig(dir=str(out), retain=RetainConfig(max_gb=1e-9))
    outputs = CameraOutputs(config, Metrics())
    outputs.open("cam", live=False, record=RecordConfig(enabled=True, segment_s=1))
    rec = outputs.recordings["cam"]
    connection = Connection(SourceConfig(id="cam", uri=clip(tmp_path, "a.mp4", frames=30)), lambda why: None, tap=rec)
    sum(1 for _ in connection.frames(lambda: False))
    connection.close()
    while rec.writer.open_file is None or len(files(out)) < 3 or not rec._queue.empty():
        threading.Event().wait(0.01)
    *finished, writing = files(out)
    assert outputs.is_open(writing) and not any(outputs.is_open(f) for f in finished)
    retention = OutputRetention(config, outputs.is_open, Metrics(), outputs.index, cameras=outputs_of(outputs))
    removed = retention.parts[0].sweep()  # the recordings are in the run's record, under their name
    assert sorted(removed) == finished and files(out) == [writing]
    outputs.close("cam", last=True)
