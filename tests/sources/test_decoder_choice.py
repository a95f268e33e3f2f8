"""The decoder a camera opens: the configured hardware decoder when it decodes the
stream's codec, its sibling of the same kind for another codec (`h264_cuvid` on an HEVC
stream -> `hevc_cuvid`), else FFmpeg's software decoder, said in one warning line.
Opening a CUDA decoder needs a GPU: the choice is tested as a function over FFmpeg's
real list of decoders, the fallback on a real HEVC clip."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from pipeline.config import SourceConfig
from pipeline.sources.connection import Connection, DecoderChoice, choose_decoder, ffmpeg_decoders

FRAMES = 24


@pytest.fixture(scope="module")
def hevc_clip(tmp_path_factory) -> str:
    """A real HEVC (libx265) clip of FRAMES frames of a picture moving across."""
    from synthetic import Mover, render

    path = str(tmp_path_factory.mktemp("hevc") / "hevc.mp4")
    block = np.full((60, 80, 3), (40, 160, 220), np.uint8)
    render([Mover(block, (0, 0), (240, 180))], path, FRAMES, (320, 240), 25,
           codec=("libx265", {"x265-params": "log-level=error"}))
    return path


@pytest.mark.parametrize("codec, sibling", [("hevc", "hevc_cuvid"), ("av1", "av1_cuvid"), ("vp9", "vp9_cuvid"),
                                            ("mpeg2video", "mpeg2_cuvid"), ("h264", "h264_cuvid")])
def test_a_cuvid_decoder_of_another_codec_is_swapped_for_the_streams(codec, sibling):
    choice = choose_decoder(codec, "h264_cuvid", ffmpeg_decoders())
    assert choice.decoder == sibling
    assert (choice.why is None) == (codec == "h264")
    if choice.why:
        assert choice.why == f"decoder h264_cuvid decodes h264, the stream is {codec}"


def test_any_kind_of_hardware_decoder_is_swapped_for_its_sibling():
    assert choose_decoder("hevc", "h264_qsv", ffmpeg_decoders()).decoder == "hevc_qsv"
    assert choose_decoder("vp9", "hevc_v4l2m2m", ffmpeg_decoders()).decoder == "vp9_v4l2m2m"


def test_without_a_sibling_or_a_known_decoder_software_decodes_and_says_why():
    decoders = ffmpeg_decoders()
    without_hevc_cuvid = {d: c for d, c in decoders.items() if d != "hevc_cuvid"}
    assert choose_decoder("hevc", "h264_cuvid", without_hevc_cuvid) == DecoderChoice(
        None, "decoder h264_cuvid decodes h264, the stream is hevc and FFmpeg has no hevc decoder of its kind")
    assert choose_decoder("prores", "h264_cuvid", decoders).decoder is None  # NVDEC has no ProRes
    assert choose_decoder("hevc", "h264", decoders).decoder is None  # a software decoder of another codec
    assert choose_decoder("h264", "h264_cuvd", decoders) == DecoderChoice(
        None, "decoder h264_cuvd is not one this FFmpeg has")
    assert choose_decoder("h264", None, decoders) == DecoderChoice(None)


def decode_all(path: str, decoder: str, said: set[str] | None = None) -> int:
    conn = Connection(SourceConfig(id="cam", uri=path, live=False, decoder=decoder), lambda why: None, said)
    try:
        return sum(1 for _ in conn.frames(lambda: False))
    finally:
        conn.close()


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "pipeline.source" and r.levelno >= logging.WARNING]


def test_an_hevc_camera_configured_with_h264_cuvid_decodes_in_software_said_once(hevc_clip, caplog):
    """No GPU here: hevc_cuvid (the sibling) fails to open, software decodes every frame,
    one warning says which decoder and why; the camera's next connection says nothing."""
    said: set[str] = set()
    with caplog.at_level(logging.INFO, logger="pipeline.source"):
        assert decode_all(hevc_clip, "h264_cuvid", said) == FRAMES
        assert decode_all(hevc_clip, "h264_cuvid", said) == FRAMES  # a loop pass or a reconnect
    [line] = warnings(caplog)
    assert line.startswith("camera cam: decoder h264_cuvid decodes h264, the stream is hevc; "
                           "decoder hevc_cuvid unavailable (")
    assert line.endswith("; decoding hevc in software (hevc)")


def test_an_hevc_camera_configured_with_a_decoder_of_another_codec_still_decodes(hevc_clip, caplog):
    """`decoder: h264` opens fine on an HEVC stream and decodes nothing; what a GPU would
    show with h264_cuvid, shown without one."""
    with caplog.at_level(logging.INFO, logger="pipeline.source"):
        assert decode_all(hevc_clip, "h264") == FRAMES
    assert warnings(caplog) == ["camera cam: decoder h264 decodes h264, the stream is hevc and FFmpeg has no hevc "
                                "decoder of its kind; decoding hevc in software (hevc)"]
