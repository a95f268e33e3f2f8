"""A camera's live stream on real packets (H.264 with a B-pyramid, read by real
connections): fMP4 copied byte for byte, each picture's media time the one its fragment
shows, a viewer who comes late starting at the newest keyframe, one who is slow skipping
to the next keyframe, no muxer while nobody watches, the timeline rising across a restart."""
from __future__ import annotations

import json

import av
import pytest

from pipeline.live import stream as stream_module
from pipeline.live import viewers as viewers_module
from pipeline.live.fmp4 import codec_string
from pipeline.live.stream import LiveStream
from pipeline.live.subscriber import CONTROL, FRAGMENT, INIT, MAX_FRAGMENTS, RECORD, Subscriber
from live_clips import fmp4_of, numbered_clip, packets, pictures, play


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> str:
    return numbered_clip(str(tmp_path_factory.mktemp("live") / "b.mp4"))


def texts(messages: list) -> list[dict]:
    return [json.loads(p) for kind, p in messages if kind in (CONTROL, RECORD)]


def test_the_clip_has_b_frames_out_of_order(clip):
    with av.open(clip) as c:
        ps = [p for p in c.demux(c.streams.video[0]) if p.size]
    assert any(p.pts != p.dts for p in ps) and any(b.pts < a.pts for a, b in zip(ps, ps[1:]))


def test_each_pictures_media_time_is_the_one_its_fragment_shows_across_a_restart(clip):
    live, sub = LiveStream("cam", "sub"), Subscriber()
    first = play(live, clip, None, 1, sub)
    second = play(live, clip)  # the camera's next connection: a file's next loop
    messages = sub.take()
    got = pictures(fmp4_of(messages))
    hooked = first + second
    assert [n for n, _ in hooked] == list(range(30)) * 2
    times = [t for _, t in hooked]
    assert all(b > a for a, b in zip(times, times[1:]))  # rising through the restart
    # every picture the viewer got (the last waits in the muxer for its next packet) at the hook's time
    assert got == hooked[:len(got)] and len(got) == len(hooked) - 1
    assert {"type": "gap"} in texts(messages)


def test_fragments_hold_the_cameras_packets_copied(clip):
    live, sub = LiveStream("cam", "sub"), Subscriber()
    play(live, clip, None, 1, sub)
    messages = sub.take()
    init = texts(messages)[0]
    with av.open(clip) as c:
        assert init["type"] == "init" and init["codec"] == codec_string(bytes(c.streams.video[0].codec_context.extradata))
    assert (init["width"], init["height"], init["fps"]) == (64, 48, 10.0)
    assert init["mime"] == f'video/mp4; codecs="{init["codec"]}"'
    assert packets(fmp4_of(messages)) == packets(clip)[:-1]


def test_the_codec_string_is_the_streams_profile_and_level(clip):
    with av.open(clip) as c:
        extradata = bytes(c.streams.video[0].codec_context.extradata)
    assert extradata[0] == 1  # avcC: profile, constraints, level follow its version
    assert codec_string(extradata) == "avc1." + extradata[1:4].hex().upper()
    annex_b = b"\x00\x00\x00\x01\x67" + extradata[1:4] + b"\xff"
    assert codec_string(b"", annex_b) == codec_string(extradata)


def test_a_late_viewer_starts_at_once_from_the_newest_keyframe(clip):
    live, sub = LiveStream("cam", "sub"), Subscriber()
    shown = play(live, clip, until=15)
    assert live.subscribe(sub) is None
    messages = sub.take()  # at once: before any further packet
    assert [k for k, _ in messages[:2]] == [CONTROL, INIT]
    got = pictures(fmp4_of(messages))
    assert got[0][0] == 10  # the GOP that picture 14 is in starts at frame 10
    assert set(got) <= set(shown + play(LiveStream("cam", "sub"), clip)[15:])  # (the same timeline)


def test_no_muxer_runs_while_nobody_watches(clip, monkeypatch):
    made = []
    real = viewers_module.Fmp4Muxer
    monkeypatch.setattr(viewers_module, "Fmp4Muxer", lambda template: made.append(1) or real(template))
    live, sub = LiveStream("cam", "sub"), Subscriber()
    play(live, clip)
    assert not made and not live.watched
    assert live.subscribe(sub) is None
    assert made == [1]
    live.unsubscribe(sub)
    play(live, clip)
    assert made == [1]


def test_a_slow_viewer_skips_to_the_next_keyframe_and_never_holds_the_camera(clip):
    read: list = []
    live, slow = LiveStream("cam", "sub"), Subscriber()
    fast = Subscriber(lambda: read.extend(fast.take()))  # reads each message as it comes
    hooked = play(live, clip, None, 1, slow, fast)
    for _ in range(2 * MAX_FRAGMENTS // 30):  # the slow one never reads: the camera goes on
        hooked += play(live, clip)
    assert slow.skipped > 0
    kept = slow.take()
    fragments = [p for k, p in kept if k == FRAGMENT]
    assert len(fragments) <= MAX_FRAGMENTS
    assert pictures(fmp4_of(kept[:2] + [m for m in kept if m[0] == FRAGMENT]))[0][0] % 10 == 0  # from a keyframe
    assert fast.skipped == 0
    assert pictures(fmp4_of(read)) == hooked[:-1]


def test_a_viewer_queue_overflow_resumes_at_a_keyframe():
    sub = Subscriber()
    sub.init(b"init")
    sub.fragment(b"k", True)
    for _ in range(MAX_FRAGMENTS - 1):
        sub.fragment(b"p", False)
    sub.record("r")
    assert [p for _, p in sub.take()] == [b"init", b"k"] + [b"p"] * (MAX_FRAGMENTS - 1) + ["r"]  # full, kept
    for _ in range(MAX_FRAGMENTS + 1):  # one more than it holds: emptied
        sub.fragment(b"p", False)
    sub.record("dropped while skipping")
    sub.control("kept")
    sub.fragment(b"p", False)
    sub.fragment(b"k2", True)
    sub.record("r2")
    assert [p for _, p in sub.take()] == ["kept", b"k2", "r2"]
    assert sub.skipped == MAX_FRAGMENTS + 2


def test_a_viewers_loop_is_woken_once_for_what_waits_and_again_after_it_takes():
    wakes: list[int] = []
    sub = Subscriber(lambda: wakes.append(1))
    sub.init(b"init")
    sub.fragment(b"k", True)
    sub.record("r")
    assert len(wakes) == 1  # the loop has not taken yet: one wake covers all three
    assert [p for _, p in sub.take()] == [b"init", b"k", "r"]
    sub.fragment(b"p", False)
    assert len(wakes) == 2
    for _ in range(MAX_FRAGMENTS + 1):  # overflow: the queue is emptied, the viewer skips to a keyframe
        sub.fragment(b"p", False)
    sub.control("kept")  # still waiting after the drop: woken for it
    assert len(wakes) == 3
    assert [p for _, p in sub.take()] == ["kept"]
    sub.fragment(b"k2", True)
    assert len(wakes) == 4 and [p for _, p in sub.take()] == [b"k2"]


def test_a_codec_the_page_cannot_play_is_unavailable(tmp_path):
    hevc = numbered_clip(str(tmp_path / "h.mp4"), frames=5, codec="libx265")
    live = LiveStream("cam", "sub")
    play(live, hevc)
    assert "hevc" in (live.subscribe(Subscriber()) or "")


def test_a_stream_without_timestamps_is_unavailable_and_says_so(clip, tmp_path):
    """A raw H.264 file has no timestamps: its viewers hear why at once instead of waiting
    for a first keyframe that never goes on."""
    raw = str(tmp_path / "b.h264")
    with av.open(clip) as src, av.open(raw, "w", format="h264") as out:
        video = out.add_stream_from_template(src.streams.video[0])
        for p in src.demux(src.streams.video[0]):
            if p.size:
                p.stream = video
                out.mux(p)
    live = LiveStream("cam", "sub")
    play(live, raw)
    assert "no timestamps" in (live.subscribe(Subscriber()) or "")


def test_a_stream_with_no_packets_yet_is_unavailable():
    assert LiveStream("cam", "sub").subscribe(Subscriber()) == stream_module.NOT_YET
