"""Export by copy on a real recording (a made H.264 clip with B-frames and AAC audio,
recorded in 1 s segments): the exported MP4 holds the recording's own packets over the
range, byte for byte and timed alike, from the keyframe at or before the start, across
segment files; a gap, a change of stream, a range too long and one nothing covers are
said; `pipeline export` writes the same file."""
from __future__ import annotations

import os
import shutil
import time
from fractions import Fraction

import av
import numpy as np
import pytest
import yaml

from pipeline.cli import main
from pipeline.config import SourceConfig
from pipeline.config.outputs import RecordConfig
from pipeline.recording.recorder import Recording
from pipeline.sources.connection import Connection
from pipeline.recording.export import ExportError, export, pieces_of, when
from pipeline.recording.segments import segment_files, stamp
from test_recorder import clip, play, recording, with_audio

RATE = 16000


def with_tone(video: str, path: str) -> str:
    """The clip with AAC audio as long as its video."""
    with av.open(video) as src, av.open(path, "w") as dst:
        v = dst.add_stream_from_template(src.streams.video[0])
        seconds = float(src.streams.video[0].duration * src.streams.video[0].time_base)
        a = dst.add_stream("aac", rate=RATE, layout="mono")  # type: ignore[call-overload]
        for p in src.demux(video=0):
            if p.size:
                p.stream = v
                dst.mux(p)
        for i in range(int(seconds * RATE) // 1024):
            tone = (np.sin(np.arange(i * 1024, (i + 1) * 1024) * 0.05) * 0.3)[None].astype("float32")
            frame = av.AudioFrame.from_ndarray(tone, format="fltp", layout="mono")
            frame.sample_rate, frame.pts = RATE, i * 1024
            for q in a.encode(frame):
                dst.mux(q)
        for q in a.encode(None):
            dst.mux(q)
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A camera's 4 s recorded by the recorder in 1 s segments: (the segment files, the source)."""
    folder = tmp_path_factory.mktemp("export")
    source = with_tone(clip(folder, "v.mp4", frames=40), str(folder / "av.mp4"))
    rec, failures = recording(folder / "out", segment_s=1)
    play(rec, source)
    files = segment_files(str(folder / "out" / "cam.rec.{start}.mp4"))
    assert len(files) == 4 and not failures
    return files, source


def timeline(files: list[tuple[str, str]]) -> list[tuple[str, bytes, bool, Fraction, Fraction]]:
    """Every packet of the segment files on the recording's own timeline (kind, bytes,
    keyframe, pts, dts; seconds): each file continues one frame after the last picture
    of the one before (a file camera's segments follow each other)."""
    out, offset = [], Fraction(0)
    for _, path in files:
        with av.open(path) as c:
            packets = [p for p in c.demux() if p.size]
            for p in packets:
                tb = p.time_base
                out.append((p.stream.type, bytes(p), bool(p.is_keyframe), offset + p.pts * tb, offset + p.dts * tb))
            last = max(p.dts * p.time_base for p in packets if p.stream.type == "video")
            offset += last + Fraction(1, 10)
    return out


def exported(path: str) -> list[tuple[str, bytes, bool, Fraction, Fraction]]:
    with av.open(path) as c:
        return [(p.stream.type, bytes(p), bool(p.is_keyframe), p.pts * p.time_base, p.dts * p.time_base)
                for p in c.demux() if p.size]


def relative(packets, kind: str, zero: Fraction) -> list[tuple[bytes, bool, Fraction, Fraction]]:
    return [(data, key, pts - zero, dts - zero) for k, data, key, pts, dts in packets if k == kind]


@pytest.mark.parametrize("start_s, end_s", [(0.75, 2.75), (1.25, 3.3)])
def test_the_export_holds_the_recordings_packets_byte_for_byte_from_the_keyframe_at_or_before_start(
        recorded, tmp_path, start_s, end_s):
    files, _ = recorded
    pieces = pieces_of(files)
    t0 = pieces[0].start  # the first segment's time 0 on the wall clock
    made = export("cam", pieces, t0 + start_s, t0 + end_s, str(tmp_path / "e.mp4"), 3600)
    packets = timeline(files)
    keyframe = max((p for p in packets if p[0] == "video" and p[2] and p[3] <= Fraction(start_s)),
                   key=lambda p: p[3])
    video = [p for p in packets if p[0] == "video" and keyframe[4] <= p[4] < Fraction(end_s)]
    audio = [p for p in packets if p[0] == "audio" and keyframe[4] <= p[4] and p[3] < Fraction(end_s)]
    got = exported(made.path)
    assert relative(got, "video", Fraction(0)) == relative(video, "video", keyframe[4])
    # the first audio packet starts its track at 0, as in each recording file (an MP4 track
    # without an edit list starts at its first packet): its bytes are compared, its time not
    first, *rest = relative(audio, "audio", keyframe[4])
    assert relative(got, "audio", Fraction(0)) == [(first[0], first[1], Fraction(0), Fraction(0)), *rest]
    assert got[0][2] and keyframe[3] <= start_s  # a keyframe first, shown at or before the start
    crossed = {int(p[4]) for p in video}  # the segments are 1 s long: these are the files it read
    assert len(crossed) >= 2 and made.notes == [] and (made.video, made.audio) == (len(video), len(audio))
    assert made.first == pytest.approx(t0 + float(keyframe[4]))


def test_a_range_deep_in_a_long_segment_starts_at_the_keyframe_at_or_before_it(tmp_path):
    """One 12 s file: the export seeks into it rather than reading it from its beginning."""
    rec, _ = recording(tmp_path / "out")
    play(rec, clip(tmp_path, "long.mp4", frames=120))
    files = segment_files(str(tmp_path / "out" / "cam.rec.{start}.mp4"))
    pieces = pieces_of(files)
    made = export("cam", pieces, pieces[0].start + 9.25, pieces[0].start + 11, str(tmp_path / "e.mp4"), 3600)
    packets = timeline(files)
    keyframe = max((p for p in packets if p[0] == "video" and p[2] and p[3] <= Fraction(9.25)), key=lambda p: p[3])
    video = [p for p in packets if p[0] == "video" and keyframe[4] <= p[4] < 11]
    assert relative(exported(made.path), "video", Fraction(0)) == relative(video, "video", keyframe[4])
    assert keyframe[3] == Fraction(92, 10) and made.first == pieces[0].start + keyframe[4]


def test_every_picture_of_the_export_decodes(recorded, tmp_path):
    files, _ = recorded
    pieces = pieces_of(files)
    made = export("cam", pieces, pieces[0].start + 0.3, pieces[0].start + 3.9, str(tmp_path / "e.mp4"), 3600)
    with av.open(made.path) as c:
        assert sum(1 for _ in c.decode(video=0)) == made.video


def moved(files, into, after: int, seconds: int) -> list[tuple[str, str]]:
    """The segment files copied into `into`, those from the `after`th on stamped `seconds` later."""
    os.makedirs(into, exist_ok=True)
    out = []
    for i, (s, path) in enumerate(files):
        t = pieces_of([(s, path)])[0].start + (seconds if i >= after else 0)
        target = os.path.join(into, f"cam.rec.{stamp(t)}.mp4")
        shutil.copy(path, target)
        out.append((stamp(t), target))
    return out


def test_a_range_over_a_gap_says_which_and_keeps_it_in_time(recorded, tmp_path):
    files = moved(recorded[0], str(tmp_path / "gap"), 2, 10)  # nothing recorded for 10 s after the second file
    pieces = pieces_of(files)
    t0 = pieces[0].start
    made = export("cam", pieces, t0 + 0.5, t0 + 14, str(tmp_path / "e.mp4"), 3600)
    (note,) = made.notes
    assert note.startswith(f"gap: no recording from {when(t0 + 1.9)} to {when(t0 + 12)}") and "10.1 s" in note
    dts = [p[4] for p in exported(made.path) if p[0] == "video"]
    steps = [b - a for a, b in zip(dts, dts[1:])]
    assert max(steps) == Fraction(101, 10) and sorted(steps)[-2] == Fraction(1, 10)  # the gap stays in time
    late = export("cam", pieces, t0 + 5, t0 + 13, str(tmp_path / "late.mp4"), 3600)  # starts in the gap
    assert late.notes[0].startswith(f"gap: no recording from {when(t0 + 5)} to {when(t0 + 12)}")
    assert late.first == t0 + 12 and exported(late.path)[0][2]


def test_a_reconnect_inside_one_file_is_a_gap_said_too(tmp_path):
    """A live camera away for a while and back within one segment: its file holds a jump
    in time, kept and said like a gap between files."""
    source = clip(tmp_path, "a.mp4", frames=20)
    rec = Recording("cam", str(tmp_path / "out"), RecordConfig(enabled=True), None, True,
                    path=lambda s: str(tmp_path / "out" / f"cam.rec.{s}.mp4"), on_failure=print)
    for i in range(2):
        if i:
            time.sleep(5)  # the camera is away: the live timeline follows the wall clock
        connection = Connection(SourceConfig(id="cam", uri=source), lambda why: None, tap=rec)
        sum(1 for _ in connection.frames(lambda: False))
        connection.close()
        rec.disconnect()
    rec.close()
    (only,) = segment_files(str(tmp_path / "out" / "cam.rec.{start}.mp4"))
    pieces = pieces_of([only])
    made = export("cam", pieces, pieces[0].start, pieces[0].start + 30, str(tmp_path / "e.mp4"), 3600)
    assert made.video == 40 and made.notes[0].startswith("gap: no recording from")
    assert float(made.notes[0].split("(")[1].split(" s,")[0]) > 2  # the time away, less the clip's 2 s


def test_audio_an_mp4_cannot_hold_is_left_out_and_said(tmp_path):
    source = with_audio(clip(tmp_path, "v.mp4"), str(tmp_path / "ulaw.mov"), "pcm_mulaw")
    rec, _ = recording(tmp_path / "out", filename="{camera}.rec.{start}.mov")
    play(rec, source)
    files = segment_files(str(tmp_path / "out" / "cam.rec.{start}.mov"))
    pieces = pieces_of(files)
    made = export("cam", pieces, pieces[0].start, pieces[0].start + 2, str(tmp_path / "e.mp4"), 3600)
    assert (made.video, made.audio) == (20, 0) and made.notes == ["audio left out: an MP4 cannot hold pcm_mulaw"]


def test_a_change_of_picture_size_ends_the_export_there_and_says_so(tmp_path):
    small, large = clip(tmp_path, "a.mp4", frames=20), clip(tmp_path, "b.mp4", size=(192, 128), frames=20)
    rec, _ = recording(tmp_path / "out")
    play(rec, small, large)
    files = segment_files(str(tmp_path / "out" / "cam.rec.{start}.mp4"))
    pieces = pieces_of(files)
    made = export("cam", pieces, pieces[0].start, pieces[0].start + 60, str(tmp_path / "e.mp4"), 3600)
    assert made.video == 20 and len(made.notes) == 1 and "the stream changes" in made.notes[0]
    assert "192x128" in made.notes[0] and "the export ends there" in made.notes[0]


def test_a_range_too_long_or_backwards_is_refused_naming_the_limit(recorded, tmp_path):
    pieces = pieces_of(recorded[0])
    t0 = pieces[0].start
    with pytest.raises(ExportError) as refused:
        export("cam", pieces, t0, t0 + 61, str(tmp_path / "e.mp4"), 60)
    assert refused.value.status == 400 and str(refused.value) == \
        "end: the range is 61 s; an export covers at most 60 s (outputs.record.export_max_s)"
    with pytest.raises(ExportError) as backwards:
        export("cam", pieces, t0 + 2, t0 + 1, str(tmp_path / "e.mp4"), 60)
    assert backwards.value.status == 400 and "is not after start" in str(backwards.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("start_s, end_s", [(-100, -50), (100, 110)])
def test_a_range_no_recording_covers_is_404_and_writes_nothing(recorded, tmp_path, start_s, end_s):
    pieces = pieces_of(recorded[0])
    t0 = pieces[0].start
    with pytest.raises(ExportError) as none:
        export("cam", pieces, t0 + start_s, t0 + end_s, str(tmp_path / "e.mp4"), 3600)
    assert none.value.status == 404 and str(none.value) == \
        f"camera cam: no recording covers {when(t0 + start_s)} to {when(t0 + end_s)}"
    assert os.listdir(tmp_path) == []


def test_a_segment_still_being_written_is_read_to_its_last_whole_fragment(recorded, tmp_path):
    files = moved(recorded[0], str(tmp_path / "open"), 4, 0)
    whole = sum(1 for p in exported(files[-1][1]) if p[0] == "video")
    data = open(files[-1][1], "rb").read()
    with open(files[-1][1], "r+b") as f:  # the last fragment torn, as a writer leaves it mid-write
        f.truncate(data.rfind(b"moof") + 400)
    pieces = pieces_of(files)
    made = export("cam", pieces, pieces[0].start, pieces[0].start + 60, str(tmp_path / "e.mp4"), 3600)
    assert 30 + 1 <= made.video < 30 + whole  # the first three files whole, the last up to its torn fragment
    assert made.notes[-1].startswith("gap: no recording from") and made.notes[-1].endswith("into the export)")


def test_pipeline_export_writes_the_same_file_and_says_the_gap(recorded, tmp_path, capsys):
    files = moved(recorded[0], str(tmp_path / "out"), 2, 10)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"sources": [{"id": "cam", "uri": "rtsp://127.0.0.1/cam"}],
                                      "models": {}, "graph": [],
                                      "outputs": {"dir": str(tmp_path / "out"), "record": {"enabled": True}}}))
    t0 = pieces_of(files)[0].start
    start, end = when(t0 + 0.5).replace("Z", ""), str(t0 + 14)  # ISO 8601 without a zone (UTC), epoch seconds
    out = tmp_path / "cli.mp4"
    assert main(["export", "--config", str(config), "--camera", "cam", "--start", start, "--end", end,
                 "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    made = export("cam", pieces_of(files), t0, t0 + 14, str(tmp_path / "e.mp4"), 3600)
    assert exported(str(out)) == exported(made.path) and printed[0].startswith(f"{out}: {made.video} video")
    assert printed[1:] == [f"note: {n}" for n in made.notes] and len(printed) == 2
    assert main(["export", "--config", str(config), "--camera", "nope", "--start", start, "--end", end]) == 2
    assert capsys.readouterr().err == f"error: --camera: no camera 'nope' in {config}, nor recordings of one\n"
    assert main(["export", "--config", str(config), "--camera", "cam", "--start", "yesterday", "--end", end]) == 2
    assert capsys.readouterr().err.startswith("error: --start: not a time: 'yesterday'")
    assert main(["export", "--config", str(config), "--camera", "cam", "--start", str(t0 - 100),
                 "--end", str(t0 - 50), "-o", str(tmp_path / "none.mp4")]) == 1
    assert "no recording covers" in capsys.readouterr().err and not (tmp_path / "none.mp4").exists()


def test_the_export_limit_is_checked_and_one_for_every_camera(tmp_path):
    from pipeline.config import read_config

    def problems(outputs: dict, record: dict) -> list[str]:
        source = {"id": "cam", "uri": "rtsp://127.0.0.1/cam", "record": record}
        return read_config({"sources": [source], "models": {}, "graph": [], "outputs": outputs}, tmp_path)[1]

    assert [p for p in problems({"record": {"export_max_s": 0}}, {}) if "export_max_s" in p] == \
        ["outputs.record.export_max_s: must be > 0, got 0.0"]
    assert [p for p in problems({}, {"export_max_s": 60}) if "export_max_s" in p] == \
        ["sources[0].record.export_max_s: one limit for every camera's exports: set outputs.record.export_max_s"]
