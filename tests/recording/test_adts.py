"""AAC in ADTS (an MPEG-TS camera's sound) recorded into MP4 and Matroska: the recording
goes on (FFmpeg's fragmented MP4 refuses ADTS, which failed it, video and all), the
sound's frames copied without their ADTS headers, described by a config made from the
stream's parameters, and decoding as the camera's own."""
from __future__ import annotations

import av
import pytest

from pipeline.recording.adts import raw_frame
from recordings import packets
from test_recorder import clip, files, play, recording, with_audio


def transport_stream(source: str, path: str) -> str:
    """`source`'s packets in an MPEG-TS, as a camera sends them (its AAC in ADTS)."""
    with av.open(source) as src, av.open(path, "w", format="mpegts") as dst:
        out = {s.index: dst.add_stream_from_template(s) for s in (src.streams.video[0], src.streams.audio[0])}
        for p in src.demux():
            if p.size:
                p.stream = out[p.stream.index]
                dst.mux(p)
    return path


def sound(path: str) -> list[float]:
    with av.open(path) as c:
        return [float(f.pts * f.time_base) for f in c.decode(audio=0)]


@pytest.mark.parametrize("ext, rate, frames", [(".mp4", 16000, 20), (".mkv", 44100, 30), (".mov", 8000, 25)])
def test_adts_aac_from_a_transport_stream_is_recorded_as_raw_frames(tmp_path, ext, rate, frames):
    video = clip(tmp_path, "v.mp4", frames=frames, bf="0")
    source = transport_stream(with_audio(video, str(tmp_path / "av.mp4"), "aac"), str(tmp_path / "cam.ts"))
    with av.open(source) as c:
        assert c.streams.audio[0].codec_context.extradata is None  # ADTS: no config of its own
        first_picture = min(p.dts for p in c.demux(video=0) if p.dts is not None)
    with av.open(source) as c:
        sent = [raw_frame(bytes(p)) for p in c.demux(audio=0) if p.size and p.dts >= first_picture]
    rec, failures = recording(tmp_path / "out", segment_s=1, filename="{camera}.rec.{start}" + ext)
    play(rec, source)
    assert not failures and rec.stats.audio == "copied"
    recorded = files(tmp_path / "out")
    assert len(recorded) == -(-frames // 10)
    assert sum(len(packets(f)) for f in recorded) == len(packets(source)) == frames  # every picture
    assert [p for f in recorded for p, _ in packets(f, "audio")] == sent  # the sound's frames, headers cut off
    heard = [len(sound(f)) for f in recorded]
    assert sum(heard) == len(sent)  # every frame decodes
