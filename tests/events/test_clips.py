"""Clips around events are cut from the encoded packets: they start on a keyframe at or
before `pre_s`, run to `post_s` after the last event close to them (events share one up to
`max_s`), decode, and the ring that feeds them holds packets, bounded."""
import os
from fractions import Fraction

import av
import numpy as np
import pytest

from pipeline.events.clips import ClipRecorder, PacketRing
from pipeline.recording.packets import Held
from pipeline.recording.mp4 import playable_end

from numbered_clips import FPS, encoder, numbered_packets, shown


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
            clip = rec.event("e1", i / FPS).path
        if i == 45:
            assert rec.event("e2").path == clip  # at the newest packet's time
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
    first = round(decoded[0].to_ndarray(format="gray").mean() / 7) / FPS  # frame i is grey 7i: its time in the video
    assert key.is_keyframe and times[0] == 0  # the clip plays from its start
    assert 4.0 - 1.5 - 1.0 < first <= 4.0 - 1.5  # from the keyframe before pre, within a GOP
    assert first + times[-1] >= 4.5 + 1.0 - 1 / FPS  # post after the last event
    assert np.all(np.diff(times) > 0) and len(times) == round((times[-1] - times[0]) * FPS) + 1


def test_a_clip_being_written_plays_up_to_its_last_whole_fragment_at_every_moment(tmp_path):
    """What the page's player gets of a clip still being written (`playable_end`): a plain
    MP4 has no index until it is closed, and Chromium showed an empty player (media error 4)."""
    out, stream = encoder(str(tmp_path / "cam.mp4"), gop=FPS)
    rec = ClipRecorder(str(tmp_path / "events"), pre_s=1.5, post_s=3.0)
    clip, playable = None, []
    for i, vf in frames(80):
        for packet in stream.encode(vf):
            rec.packet(packet, stream)
            out.mux(packet)
        if i == 40:
            clip = rec.event("e", i / FPS).path
        if clip and clip in rec.open_files:
            served = tmp_path / "served.mp4"
            with open(clip, "rb") as f:
                served.write_bytes(f.read(playable_end(clip)))
            with av.open(str(served)) as c:
                playable.append(len(list(c.decode(video=0))))
    rec.close()
    out.close()
    assert len(playable) >= 25 and playable[0] >= FPS  # from the event on; of the pre-roll, a GOP at once at least
    assert playable == sorted(playable) and playable[-1] >= 40  # growing as it is written, a second behind at most


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
            clip = rec.event("e").path
            assert rec.open_files == [clip]
    rec.close()
    out.close()
    assert clip and not rec.open_files


def grey_frames(sizes: list[tuple[int, int]], per_size: int):
    """Frames of the camera's video, `per_size` at each (width, height) in turn; frame i is grey level 5 + 4i."""
    from pipeline.frames import Frame

    for k, (w, h) in enumerate(sizes):
        for j in range(per_size):
            i = k * per_size + j
            yield i, Frame("cam", i, i, Fraction(1, FPS), np.full((h, w, 3), 5 + 4 * i, np.uint8), 0.0, Fraction(FPS))


def decoded(path: str) -> list[tuple[int, int, float]]:
    with av.open(path) as c:
        return [(f.width, f.height, float(f.to_ndarray(format="gray").mean())) for f in c.decode(video=0)]


def camera_video(tmp_path, rec: ClipRecorder):
    """The camera's video writer (a new encoder at each size, as in a run), feeding `rec`."""
    from pipeline.config import VideoOutputConfig
    from pipeline.sinks.encoder import VideoWriter

    return VideoWriter(str(tmp_path / "cam.mp4"), VideoOutputConfig(options={"g": str(FPS)}), on_packet=rec.packet)


def test_a_clip_across_size_changes_is_one_clip_per_size_each_decoding_its_own_pictures(tmp_path):
    """A clip over 768x576 / 384x288 / 768x576 decoded every frame as 768x576, the other
    sizes' pictures off by 11-17 grey levels, without a word."""
    rec = ClipRecorder(str(tmp_path / "events"), pre_s=1.0, post_s=2.5)
    video = camera_video(tmp_path, rec)
    refs = {}
    for i, frame in grey_frames([(64, 48), (96, 64), (64, 48)], 20):
        if i in (15, 25):  # an event before the first change, one after it (its pre-roll spans the change)
            refs[i] = rec.event(f"e{i}")
        video.write(frame)
    video.close()
    rec.close()
    first = refs[15].path
    assert refs[25].path == first.replace(".mp4", ".part1.mp4")  # the event while the part is open shares it
    assert rec.written == [first, first.replace(".mp4", ".part1.mp4"), first.replace(".mp4", ".part2.mp4")]
    shown = [decoded(p) for p in rec.written]
    assert {(w, h) for w, h, _ in shown[0]} == {(64, 48)} and {(w, h) for w, h, _ in shown[1]} == {(96, 64)}
    assert {(w, h) for w, h, _ in shown[2]} == {(64, 48)}
    greys = [g for part in shown for _, _, g in part]
    first_frame = round((greys[0] - 5) / 4)
    assert first_frame == 0  # the keyframe at or before pre_s
    assert all(abs(g - (5 + 4 * (first_frame + k))) < 3 for k, g in enumerate(greys)), greys  # every picture, in order
    assert first_frame + len(greys) >= 25 + 25  # post_s after the last event (within a frame), across the parts


def test_a_pre_roll_across_a_size_change_is_shortened_and_says_so(tmp_path):
    rec = ClipRecorder(str(tmp_path / "events"), pre_s=1.5, post_s=0.5)
    video = camera_video(tmp_path, rec)
    ref = None
    for i, frame in grey_frames([(64, 48), (96, 64)], 20):
        if i == 25:
            ref = rec.event("e")
        video.write(frame)
    video.close()
    rec.close()
    assert ref.pre_s == 0.4 and ref.note == "pre_s shortened: the video changed size"  # from frame 20 to 24
    assert {(w, h) for w, h, _ in decoded(ref.path)} == {(96, 64)}


def test_clips_max_mb_bounds_the_ring_and_each_clip_and_a_pre_roll_it_shortens_says_so(tmp_path):
    """With `max_mb: 0.5` one clip was 5.17 MB (from frame 0, the one keyframe), and
    overlapping clips 18 MB for a 35 s video."""
    out, stream = encoder(str(tmp_path / "cam.mp4"), gop=FPS)
    sizes = []
    for i, vf in frames(30):
        sizes += [len(bytes(p)) for p in stream.encode(vf)]
    budget = sum(sizes[:FPS]) * 3  # about three GOPs per clip, one and a half for the pre-roll
    rec = ClipRecorder(str(tmp_path / "events"), pre_s=4.0, post_s=60.0, max_bytes=budget)
    out, stream = encoder(str(tmp_path / "cam2.mp4"), gop=FPS)
    refs, held = {}, []
    for i, vf in frames(120):
        for packet in stream.encode(vf):
            rec.packet(packet, stream)
            out.mux(packet)
        held.append(rec.ring.bytes)
        if i in (50, 100):
            refs[i] = rec.event(f"e{i}")
    rec.close()
    out.close()
    assert max(held) <= budget // 2
    assert all(os.path.getsize(p) <= budget + 4096 for p in rec.written)  # the packets, plus the MP4's index
    ref = refs[50]
    assert ref.pre_s is not None and 0 < ref.pre_s < 4.0 and ref.pre_s == round(ref.pre_s)  # on a keyframe
    assert ref.note == (f"pre_s shortened to the first keyframe within the {budget // 2 / 1e6:g} MB of clips.max_mb "
                        f"kept for it")
    assert len(rec.written) == 2  # the first ended at max_mb before the second event, which has its own


def with_an_outage(folder, away: int) -> tuple[list[Held], object]:
    """A camera's packets (a keyframe a second) with `away` ticks (1/FPS) missing from frame
    50 on, where it comes back with a keyframe (a reconnect), and the stream they came in."""
    out, stream = encoder(str(folder / "cam.mp4"), gop=FPS)
    held = []
    for packet in [p for _, vf in frames(100) for p in stream.encode(vf)] + list(stream.encode(None)):
        held.append(Held.of(packet))
        out.mux(packet)  # the camera's own video: its stream's codec headers are complete once one is muxed
    out.close()
    for h in held[50:]:
        h.pts, h.dts = h.pts + away, h.dts + away
    return held, stream


def test_a_pre_roll_never_reaches_across_an_outage_and_says_how_long_the_video_was_away(tmp_path):
    """An event 0.5 s after a camera came back from 18.9 s away: its clip began with the
    last GOP before the outage (an 18.9 s jump in it) and no clip_note."""
    held, stream = with_an_outage(tmp_path, 189)
    rec = ClipRecorder(str(tmp_path / "events"), pre_s=3.0, post_s=1.0)
    ref = None
    for i, h in enumerate(held):
        rec.add(h, stream)
        if i == 55:
            ref = rec.event("e", h.seconds)
    rec.close()
    assert ref.pre_s == 0.5 and ref.note == "pre_s shortened: the video was interrupted for 18.9 s before"
    with av.open(ref.path) as c:
        times = [float(f.pts * f.time_base) for f in c.decode(video=0)]
    assert times[0] == 0 and np.allclose(np.diff(times), 1 / FPS)  # no jump: from the keyframe it came back with
    assert len(times) == 5 + 1 + 10  # 5.0 to 5.5 s and post_s after


def test_a_clip_under_way_at_an_outage_goes_on_in_its_next_part_after_it(tmp_path):
    held, stream = with_an_outage(tmp_path, 20)  # away 2.1 s, back before post_s is over
    rec = ClipRecorder(str(tmp_path / "events"), pre_s=1.0, post_s=4.0)
    for i, h in enumerate(held):
        rec.add(h, stream)
        if i == 45:
            first = rec.event("e", h.seconds).path
    rec.close()
    assert rec.written == [first, first.replace(".mp4", ".part1.mp4")]
    parts = []
    for path in rec.written:
        with av.open(path) as c:
            parts.append([float(f.pts * f.time_base) for f in c.decode(video=0)])
    assert all(p[0] == 0 and np.allclose(np.diff(p), 1 / FPS) for p in parts)  # neither jumps
    assert [len(p) for p in parts] == [20, 16]  # 3.0 s (the keyframe before pre_s) to 4.9 s; 7.0 s to 8.5 s


@pytest.mark.parametrize("lead", [0, 10], ids=["live", "from_a_recording_ahead"])
def test_events_that_keep_coming_share_a_clip_only_up_to_max_s_and_each_names_a_clip_showing_it(tmp_path, lead):
    """A busy camera's events, each within post_s of the one before, all named one clip that
    grew for the whole 17-minute run (31.7 MB). A clip past max_s takes no more events and
    goes on beside the next one to post_s after its last."""
    pre_s, post_s, max_s = 1.0, 3.0, 6.0
    held, stream = numbered_packets(tmp_path, 300)
    rec = ClipRecorder(str(tmp_path / "events"), pre_s=pre_s, post_s=post_s, lead_s=lead / FPS, max_s=max_s)
    moments = range(20, 260, 17)  # 1.7 s apart: closer than post_s, for 24 s
    refs = {}
    for h in held:
        if lead == 0 and h.pts in moments:  # the sink marks a frame's events before it encodes the frame
            refs[h.pts] = rec.event(f"e{h.pts}")
        rec.add(h, stream)
        if lead and h.pts - lead in moments:  # a recording's packets run ahead of the analysis
            refs[h.pts - lead] = rec.event(f"e{h.pts - lead}", (h.pts - lead) / FPS)
        assert set(rec.open_files) == {r.path for r in refs.values()} - set(rec.written)  # retention leaves them
    rec.close()
    clips = {path: shown(path) for path in rec.written}
    assert len(clips) == len(rec.written) >= 3 and set(clips) == {r.path for r in refs.values()}
    for frames_ in clips.values():  # each plays every frame in order, within max_s + post_s + a GOP
        assert frames_ == list(range(frames_[0], frames_[0] + len(frames_)))
        assert len(frames_) <= (max_s + post_s + 1) * FPS
    for k, ref in refs.items():  # its moment, its pre-roll and its post_s in the clip it names
        assert ref.pre_s is None and {k - pre_s * FPS, k, k + post_s * FPS} <= set(clips[ref.path])


@pytest.mark.parametrize("lead", [0, 10], ids=["live", "from_a_recording_ahead"])
def test_keyframes_further_apart_than_max_s_give_one_clip_per_keyframe_not_one_per_event(tmp_path, lead, caplog):
    """A camera whose keyframes came 75 s apart (max_s 3): every event past max_s opened a
    clip from the same old keyframe, 70 clips of 50-76 s (248 MB beside an 11 MB video).
    A clip can only start on a keyframe: an event whose clip would start no later than the
    open one's shares it, said once in the log."""
    pre_s, post_s, max_s, gop = 1.0, 1.0, 3.0, 8 * FPS
    held, stream = numbered_packets(tmp_path, 340, gop=gop)
    keys = [h.pts for h in held if h.keyframe]
    assert min(b - a for a, b in zip(keys, keys[1:])) > max_s * FPS  # the camera this is about
    rec = ClipRecorder(str(tmp_path / "events" / "hall"), pre_s=pre_s, post_s=post_s, lead_s=lead / FPS, max_s=max_s)
    moments = range(20, 320, 15)  # 1.5 s apart, for 30 s
    refs = {}
    with caplog.at_level("INFO", logger="pipeline.clips"):
        for h in held:
            if lead == 0 and h.pts in moments:
                refs[h.pts] = rec.event(f"e{h.pts}")
            rec.add(h, stream)
            if lead and h.pts - lead in moments:
                refs[h.pts - lead] = rec.event(f"e{h.pts - lead}", (h.pts - lead) / FPS)
        rec.close()
    clips = {path: shown(path) for path in rec.written}
    assert set(clips) == {r.path for r in refs.values()}
    for frames_ in clips.values():  # each decodes every frame in order, from a keyframe of its own
        assert frames_ == list(range(frames_[0], frames_[0] + len(frames_))) and frames_[0] in keys
        assert len(frames_) <= (gop / FPS + pre_s + post_s) * FPS + 1  # as long as the keyframe interval needs
    assert len({f[0] for f in clips.values()}) == len(clips) <= len(keys)
    pre_rolls = (len(clips) - 1) * ((pre_s + post_s) * FPS + 1)  # a clip and the one before share its pre-roll at most
    assert sum(len(f) for f in clips.values()) <= len(held) + pre_rolls
    for k, ref in refs.items():
        assert ref.pre_s is None and {k - pre_s * FPS, k, k + post_s * FPS} <= set(clips[ref.path])
    said = [r.getMessage() for r in caplog.records if "keyframe" in r.getMessage()]
    assert said == [f"camera hall: its video's keyframes are {gop / FPS:.1f} s apart, more than clips.max_s "
                    f"({max_s:g} s): its event clips are as long as that needs"]


def slow_camera_frames(n: int):
    """A camera analysed at a third of its frame rate (`max_fps`): frame i at 0.3 i s though
    its rate says FPS; frame i is grey level 5 + 2i."""
    from pipeline.frames import Frame

    for i in range(n):
        yield Frame("cam", i, 3 * i, Fraction(1, FPS), np.full((48, 64, 3), 5 + 2 * i, np.uint8), 0.0, Fraction(FPS))


def keyframe_times(path: str) -> list[float]:
    with av.open(path) as c:
        return [float(p.pts * p.time_base) for p in c.demux(video=0) if p.is_keyframe]


def test_the_annotated_video_has_a_keyframe_every_few_seconds_when_clips_are_cut_from_it(tmp_path):
    """Clips cut from the annotated video start on its keyframes: at libx264's default GOP
    (250 frames: 75 s for a camera analysed at 3.3 frames a second) every clip was 75 s."""
    from pipeline.config import VideoOutputConfig
    from pipeline.sinks.encoder import KEYFRAME_S, VideoWriter

    pre_s, post_s, max_s = 1.0, 1.0, 3.0
    rec = ClipRecorder(str(tmp_path / "events" / "cam"), pre_s=pre_s, post_s=post_s, max_s=max_s)
    video = VideoWriter(str(tmp_path / "cam.mp4"), VideoOutputConfig(), on_packet=rec.packet)
    refs = []
    for frame in slow_camera_frames(90):  # 27 s
        if frame.seq % 5 == 2:  # every 1.5 s
            refs.append(rec.event(f"e{frame.seq}"))
        video.write(frame)
    video.close()
    rec.close()
    keys = keyframe_times(str(tmp_path / "cam.mp4"))
    assert keys[0] == 0 and max(b - a for a, b in zip(keys, keys[1:] + [27.0])) <= KEYFRAME_S
    assert set(rec.written) == {r.path for r in refs} and len(rec.written) > 1
    for path in rec.written:
        with av.open(path) as c:
            times = [float(f.pts * f.time_base) for f in c.decode(video=0)]
        assert times[0] == 0 and times[-1] <= max_s + pre_s + post_s + KEYFRAME_S


def test_a_gop_the_video_options_set_is_kept_when_clips_are_cut_from_it(tmp_path):
    from pipeline.config import VideoOutputConfig
    from pipeline.sinks.encoder import VideoWriter

    rec = ClipRecorder(str(tmp_path / "events" / "cam"), pre_s=1.0, post_s=1.0)
    video = VideoWriter(str(tmp_path / "cam.mp4"), VideoOutputConfig(options={"g": "60"}), on_packet=rec.packet)
    for frame in slow_camera_frames(90):
        video.write(frame)
    video.close()
    rec.close()
    assert keyframe_times(str(tmp_path / "cam.mp4")) == [0.0, 18.0]  # a keyframe every 60 frames, as asked
