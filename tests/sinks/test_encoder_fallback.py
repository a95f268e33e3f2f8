"""A hardware encoder that cannot open (NVENC: none on this machine, none on Hopper
data-centre GPUs such as the H200) falls back to libx264 with libx264's own settings:
options written for NVENC (`preset: p4`, `rc`) go to NVENC only, and dropping them is
said once per camera, not at every segment."""
from __future__ import annotations

import logging

import av
import pytest

from pipeline.metrics.registry import Metrics
from pipeline.sinks.camera_files import CameraOutputs
from pipeline.recording.segments import segment_files
from pipeline.sinks.encoder import encoder_problem
from segment_frames import frame, outputs_config


def nvenc_unavailable() -> bool:
    with av.open("/dev/null", "w", format="mp4") as c:
        stream = c.add_stream("h264_nvenc", rate=25)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        try:
            stream.codec_context.open()
            return False
        except Exception:
            return True


pytestmark = pytest.mark.skipif(not nvenc_unavailable(), reason="NVENC opens here: no fallback to test")


def test_nvenc_options_do_not_stop_the_libx264_fallback(tmp_path, caplog):
    out = outputs_config(tmp_path, codec="h264_nvenc", options={"preset": "p4", "rc": "vbr"}, segment_s=1)
    assert encoder_problem(out.video) is None  # was: "libx264: ... preset p4", exit 2 at the checks
    files = CameraOutputs(out, Metrics())
    with caplog.at_level(logging.WARNING, logger="pipeline.sink"):
        files.open("cam", live=False)
        for seq in range(50):  # two segments: two encoders opened
            files.write(frame(seq))
        files.close("cam", last=True)
    assert not files.failures.failed
    videos = segment_files(str(tmp_path / "out" / "cam.{start}.mp4"))
    assert len(videos) == 2
    for _, path in videos:
        with av.open(path) as c:
            assert c.streams.video[0].codec_context.name == "h264"
            assert sum(1 for _ in c.decode(video=0)) == 25
    said = [r.getMessage() for r in caplog.records if "h264_nvenc unavailable" in r.getMessage()]
    assert len(said) == 1 and "using libx264 without its options (preset, rc)" in said[0]
