"""The frame rate of files whose timestamps are broken: the container's average is
measured from them and goes wrong with them; the codec's own rate is then the one to use."""
from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import av
import numpy as np
import pytest

from conftest import detector_model
from pipeline.config import SourceConfig
from pipeline.frames import Frame
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import RunControl
from pipeline.sources.connection import Connection, frame_rate


def write_clip(path: str, codec: str = "mpeg4", frames: int = 120, fps: int = 10, fmt: str | None = None,
               timestamps: str = "zero") -> str:
    """A small clip encoded at `fps`; its packets' timestamps are all 0 (`zero`), absent
    (`none`, a raw elementary stream), or every other frame's step (`half`: the packets
    arrive at half the codec's declared rate)."""
    with av.open(path, "w", format=fmt) as out:
        s = out.add_stream(codec, rate=fps)
        s.width, s.height, s.pix_fmt = 96, 64, "yuv420p"
        for i in range(frames):
            picture = np.full((64, 96, 3), (i * 7) % 250, np.uint8)
            vf = av.VideoFrame.from_ndarray(picture, format="bgr24").reformat(format="yuv420p")
            vf.pts = i
            for p in s.encode(vf):
                out.mux(restamp(p, timestamps))
        for p in s.encode(None):
            out.mux(restamp(p, timestamps))
    return path


def restamp(packet: av.Packet, timestamps: str) -> av.Packet:
    if timestamps == "zero":
        packet.pts = packet.dts = 0
    elif timestamps == "half":
        packet.pts, packet.dts = packet.pts * 2, packet.dts * 2
    return packet


def source(uri: str) -> SourceConfig:
    return SourceConfig(id="a", uri=uri, live=False)


def test_all_zero_timestamps_take_the_codecs_rate_not_the_containers_1200(tmp_path):
    path = write_clip(str(tmp_path / "zero.mp4"))
    with av.open(path) as c:
        stream = c.streams.video[0]
        assert stream.average_rate == 1200 and stream.codec_context.framerate == 10  # the file as the issue had it
        assert frame_rate(stream) == 10


def test_missing_timestamps_take_the_codecs_rate_not_the_demuxers_default(tmp_path):
    path = write_clip(str(tmp_path / "raw.h264"), codec="libx264", fmt="h264", timestamps="none")
    with av.open(path) as c:
        stream = c.streams.video[0]
        assert stream.average_rate == 25 and stream.codec_context.framerate == 10
        assert frame_rate(stream) == 10


def test_a_plausible_measured_rate_is_kept(tmp_path):
    """Packets at 5 fps from an encoder that declared 10: what arrives is what counts."""
    path = write_clip(str(tmp_path / "half.mp4"), frames=30, timestamps="half")
    with av.open(path) as c:
        stream = c.streams.video[0]
        assert stream.codec_context.framerate == 10
        assert float(frame_rate(stream)) == pytest.approx(5, abs=0.2)


def test_frames_of_a_file_with_all_zero_timestamps_are_timed_at_the_codecs_rate(tmp_path, model_path,
                                                                                write_config):
    """Through the camera's thread: every frame says 10 fps (the rate the output video is
    written at) and is stamped 0.1 s after the one before."""
    from pipeline.config import load_config
    from pipeline.preprocess import Preprocessor
    from pipeline.sources.camera import VideoSource

    path = write_clip(str(tmp_path / "zero.mp4"), frames=30)
    cfg = load_config(write_config({"sources": [{"id": "a", "uri": path}],
                                    "models": {"det": detector_model(model_path)},
                                    "graph": [{"detect": {"model": "det"}}]}))
    got: list = []
    lane = SimpleNamespace(put=got.append, wait_turn=lambda: None, end_turn=lambda: None)
    camera = VideoSource(cfg.sources[0], Preprocessor(cfg.detector), lane, Metrics(), RunControl())
    camera.start()
    camera.join(60)
    frames = [f for f in got if isinstance(f, Frame)]
    assert len(frames) == 30
    assert {f.rate for f in frames} == {Fraction(10)}
    times = [f.pts_seconds for f in frames]
    assert np.diff(times) == pytest.approx(np.full(29, 0.1), abs=1e-3)


def test_a_connection_reports_the_codecs_rate(tmp_path):
    path = write_clip(str(tmp_path / "zero.mp4"), frames=40)
    connection = Connection(source(path), on_bad_packet=lambda message: None)
    try:
        assert connection.rate == 10
    finally:
        connection.close()
