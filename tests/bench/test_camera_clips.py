"""Camera-like clips made from the sample (`pipeline.bench.camera_clips`), tiny here: a fixed GOP,
B-frames where asked, a sub-stream on the main stream's frames, still-active-still."""
from __future__ import annotations

import av
import numpy as np
import pytest

from pipeline.bench import camera_clips as clips

SMALL = clips.Encoding(size=(320, 180), fps=10, gop_s=1.0)


def frames(path: str) -> list[tuple[float, bool, np.ndarray]]:
    with av.open(path) as c:
        return [(f.time, f.key_frame, f.to_ndarray(format="gray")) for f in c.decode(video=0)]


def packets(path: str) -> list[av.Packet]:
    with av.open(path) as c:
        return [p for p in c.demux(video=0) if p.size]


@pytest.fixture(scope="module")
def main_clip(tmp_path_factory, sample_path) -> str:
    path = tmp_path_factory.mktemp("clips") / "main.mp4"
    return clips.camera_clip(path, SMALL, source=sample_path("vtest.mp4"), seconds=3)


def test_a_camera_clip_has_a_keyframe_every_gop_and_its_own_rate(main_clip):
    got = frames(main_clip)
    assert len(got) == 30 and all(f[2].shape == (180, 320) for f in got)
    assert [i for i, f in enumerate(got) if f[1]] == [0, 10, 20]  # no scene-cut keyframes in between
    assert [round(f[0], 3) for f in got] == [round(i / 10, 3) for i in range(30)]
    assert all(p.pts == p.dts for p in packets(main_clip))  # no B-frames


def test_b_frames_reorder_the_packets(tmp_path, sample_path):
    path = clips.camera_clip(tmp_path / "b.mp4", clips.Encoding(size=(320, 180), fps=10, bframes=2),
                             source=sample_path("vtest.mp4"), seconds=2)
    assert any(p.pts != p.dts for p in packets(path))
    assert len(frames(path)) == 20


def test_a_sub_stream_has_the_main_streams_frames_times_and_keyframes(main_clip, tmp_path):
    sub = frames(clips.sub_stream(main_clip, tmp_path / "sub.mp4", (160, 90)))
    main = frames(main_clip)
    assert [(round(t, 3), k) for t, k, _ in sub] == [(round(t, 3), k) for t, k, _ in main]
    assert sub[0][2].shape == (90, 160)


def test_an_idle_clip_is_still_with_sensor_noise_then_active_then_still(tmp_path, sample_path):
    path = clips.idle_clip(tmp_path / "idle.mp4", SMALL, source=sample_path("vtest.mp4"), still_s=1, active_s=2)
    got = [f[2].astype(np.int16) for f in frames(path)]
    assert len(got) == 40
    change = [np.abs(b - a).mean() for a, b in zip(got, got[1:])]
    still = change[:9] + change[30:]
    assert 0 < max(still) < min(change[10:29])  # noise, never nothing; people walking move more
    assert not np.array_equal(got[0], got[1])


def test_a_named_clip_is_made_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_CLIPS", str(tmp_path / "cache"))
    made = []

    def tiny(path, encoding, source=clips.SAMPLE, seconds=None):  # the recipe, at a test's size
        made.append(encoding)
        return clips.write_clip(path, clips._pictures(source, (64, 36), 0.5, encoding.fps),
                                clips.Encoding(size=(64, 36), fps=encoding.fps))

    monkeypatch.setattr(clips, "camera_clip", tiny)
    path = clips.clip("1080p-bframes", fps=12)
    assert path == str(tmp_path / "cache" / "vtest-1080p-bframes-12fps.mp4") and len(frames(path)) == 6
    assert clips.clip("1080p-bframes", fps=12) == path and len(made) == 1
    assert made[0].bframes == 2 and made[0].size == (1920, 1080)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [path.rsplit("/", 1)[1]]  # nothing half-made left
    with pytest.raises(ValueError, match="unknown clip"):
        clips.clip("4k")


def test_the_named_idle_sub_stream_is_made_from_the_named_idle_clip(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_CLIPS", str(tmp_path / "cache"))

    def tiny(path, encoding, source=clips.SAMPLE, seconds=None):
        return clips.write_clip(path, clips._pictures(source, (96, 54), 0.5, encoding.fps),
                                clips.Encoding(size=(96, 54), fps=encoding.fps))

    monkeypatch.setattr(clips, "idle_clip", tiny)
    sub = clips.clip("360p-idle", fps=10)
    main = tmp_path / "cache" / "vtest-1080p-idle-10fps.mp4"
    assert main.exists() and sub == str(tmp_path / "cache" / "vtest-360p-idle-10fps.mp4")
    assert len(frames(sub)) == len(frames(str(main))) == 5
    with av.open(sub) as c:
        assert (c.streams.video[0].width, c.streams.video[0].height) == (640, 360)


def test_a_clip_started_at_a_time_plays_from_that_keyframe_then_its_start_by_copy(main_clip, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_CLIPS", str(tmp_path))
    started = clips.started_at(main_clip, 1.5)  # the keyframe at or after 1.5 s: 2.0 s
    got, main = frames(started), frames(main_clip)
    assert [round(t, 3) for t, _, _ in got] == [round(i / 10, 3) for i in range(30)]  # times rise from 0
    assert [i for i, f in enumerate(got) if f[1]] == [0, 10, 20]
    assert all(np.array_equal(g[2], m[2]) for g, m in zip(got, main[20:] + main[:20]))  # the same pictures, moved
    assert [bytes(p) for p in packets(started)] == [bytes(p) for p in packets(main_clip)[20:] + packets(main_clip)[:20]]
    assert clips.started_at(main_clip, 1.2) == started  # the same keyframe: made once
    assert clips.started_at(main_clip, 2.5) == main_clip  # past the last keyframe: the clip as it is
