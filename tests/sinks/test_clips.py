"""Clips around events are cut from the encoded packets: they start on a keyframe at or
before `pre_s`, run to `post_s` after the last event close to them, decode, and the ring
that feeds them holds packets, bounded."""
from fractions import Fraction

import av
import numpy as np

from pipeline.sinks.clips import ClipRecorder, Held, PacketRing

FPS = 10


def encoder(path: str, gop: int):
    out = av.open(path, "w")
    s = out.add_stream("libx264", rate=FPS)
    s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
    s.time_base = Fraction(1, FPS)
    s.codec_context.options = {"preset": "ultrafast", "g": str(gop), "bf": "0"}
    s.codec_context.open()
    return out, s


def frames(n: int):
    for i in range(n):
        img = np.full((48, 64, 3), (i * 7) % 255, np.uint8)
        vf = av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format="yuv420p")
        vf.pts, vf.time_base = i, Fraction(1, FPS)
        yield i, vf


def test_a_clip_spans_pre_and_post_from_a_keyframe_and_plays(tmp_path):
    out, stream = encoder(str(tmp_path / "cam.mp4"), gop=FPS)  # a keyframe every second
    rec = ClipRecorder(str(tmp_path / "events"), pre_s=1.5, post_s=1.0)
    clip = None
    for i, vf in frames(80):
        for packet in stream.encode(vf):
            rec.packet(packet, stream)
            out.mux(packet)
        if i == 40:  # an event at 4.0 s, and another at 4.5 s that shares the clip
            clip = rec.event("e1", i / FPS)
        if i == 45:
            assert rec.event("e2") == clip  # at the newest packet's time
    for packet in stream.encode(None):
        out.mux(packet)
    out.close()
    rec.close()
    assert clip and rec.written == [clip]
    with av.open(clip) as c:
        decoded = [f for f in c.decode(video=0)]
    with av.open(clip) as c:
        key = next(c.demux(video=0))
    times = [float(f.pts * f.time_base) for f in decoded]
    assert key.is_keyframe
    assert times[0] <= 4.0 - 1.5 and times[0] > 4.0 - 1.5 - 1.0  # from the keyframe before pre, within a GOP
    assert times[-1] >= 4.5 + 1.0 - 1 / FPS  # post after the last event
    assert np.all(np.diff(times) > 0) and len(times) == round((times[-1] - times[0]) * FPS) + 1


def test_the_ring_keeps_whole_gops_within_its_byte_budget():
    ring = PacketRing(pre_s=100.0, max_bytes=10_000)
    for i in range(200):
        ring.add(Held(b"x" * 500, i, i, Fraction(1, FPS), keyframe=i % 10 == 0))
    held = ring.from_keyframe()
    assert ring.bytes <= 10_000 + 10 * 500 and held[0].keyframe and held[-1].pts == 199


def test_the_clip_being_written_is_open_until_it_is_finished(tmp_path):
    """Retention asks this: a clip still being written must not be removed under it."""
    out, stream = encoder(str(tmp_path / "cam.mp4"), gop=FPS)
    rec = ClipRecorder(str(tmp_path / "events"), pre_s=1.0, post_s=1.0)
    clip = None
    for i, vf in frames(20):
        for packet in stream.encode(vf):
            rec.packet(packet, stream)
            out.mux(packet)
        if i == 12:
            clip = rec.event("e")
            assert rec.open_file == clip
    rec.close()
    out.close()
    assert clip and rec.open_file is None
