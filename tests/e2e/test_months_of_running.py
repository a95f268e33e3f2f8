"""Cameras that run for months: a looping camera writes time segments, each playable on its
own and starting on a keyframe, its video and JSON lines agreeing frame for frame, no
`seq` lost or repeated across the cuts; retention keeps the folder within its budget
while the run goes on, and memory stays flat while segments are written and removed."""
from __future__ import annotations

import contextlib
import os
import time
from fractions import Fraction

import av
import pytest

from conftest import detector_model, frame_count, read_jsonl
from pipeline.config import load_config
from pipeline.graph import Pipeline
from pipeline.metrics.report import summary_table
from pipeline.recording.segments import segment_files


@pytest.fixture(scope="module")
def slow_clip(tmp_path_factory, sample_path) -> str:
    """5 s of a street at 5 fps, 320x180: a camera that loops cheaply (one detection per 200 ms)."""
    path = str(tmp_path_factory.mktemp("clip") / "street5fps.mp4")
    with av.open(sample_path("bikes.mp4")) as inp, av.open(path, "w") as out:
        stream = out.add_stream("libx264", rate=5)
        stream.width, stream.height, stream.pix_fmt = 320, 180, "yuv420p"
        for i, frame in enumerate(inp.decode(video=0)):
            if i == 25:
                break
            small = frame.reformat(width=320, height=180, format="yuv420p")
            small.pts, small.time_base = i, Fraction(1, 5)
            for p in stream.encode(small):
                out.mux(p)
        for p in stream.encode(None):
            out.mux(p)
    return path


def looping(clip: str, model_path, out, **outputs) -> dict:
    return {"sources": [{"id": "cam", "uri": clip, "realtime": True, "loop": True}],
            "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
            "outputs": {"dir": str(out), "jsonl": {"filename": "{camera}.jsonl"}, **outputs}}


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def folder_bytes(folder) -> int:
    """The videos' and JSON lines' bytes in the folder now: retention removes files while it
    is walked, and a file gone meanwhile counts for nothing."""
    total = 0
    for d, _, names in os.walk(folder):
        for n in names:
            if n.endswith((".mp4", ".jsonl")):
                with contextlib.suppress(FileNotFoundError):
                    total += os.path.getsize(os.path.join(d, n))
    return total


def run_for(config: dict, write_config, seconds: float, every: float = 1.0, sample=lambda: None):
    p = Pipeline(load_config(write_config(config)))
    samples = []
    p.start()
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert not p.wait(every), "the looping camera ended"
            samples.append(sample())
    finally:
        p.stop()
        p.wait(60)
        p.close()
    return p.snapshot(), samples


def test_a_looping_camera_writes_segments_that_play_and_add_up(tmp_path, slow_clip, model_path, write_config):
    out = tmp_path / "out"
    snap, _ = run_for(looping(slow_clip, model_path, out, video={"segment_s": 2}), write_config, 13)
    videos = segment_files(str(out / "cam.{start}.mp4"))
    lines = segment_files(str(out / "cam.{start}.jsonl"))
    assert len(videos) >= 5 and [s for s, _ in videos] == [s for s, _ in lines]  # each video with its lines
    seqs, times, counts = [], [], []
    for (_, video), (_, jsonl) in zip(videos, lines):
        with av.open(video) as c:
            packets = [p for p in c.demux(video=0) if p.size]
        assert packets[0].is_keyframe, video
        assert frame_count(video) == len(packets), video  # every frame decodes
        records = read_jsonl(jsonl)
        assert len(records) == len(packets), video
        counts.append(len(records))
        seqs += [r["seq"] for r in records]
        times += [r["time"] for r in records]
    assert seqs == list(range(len(seqs))) and len(seqs) == snap.cameras["cam"].processed
    assert all(round(b - a, 3) == 0.2 for a, b in zip(times, times[1:]))  # time goes on at 5 fps across cuts
    assert set(counts[:-1]) == {10}  # cut on media time: each whole segment is 2 s of the clip
    assert snap.cameras["cam"].segment == os.path.basename(videos[-1][1])


def test_retention_keeps_the_folder_within_budget_and_memory_stays_flat(tmp_path, slow_clip, model_path,
                                                                         write_config):
    out = tmp_path / "out"
    budget = 100_000  # a few of its 1-s segments
    config = looping(slow_clip, model_path, out, video={"segment_s": 1}, retain={"max_gb": budget / 1e9})
    snap, samples = run_for(config, write_config, 32, sample=lambda: (rss_mib(), folder_bytes(out)))
    pairs = segment_files(str(out / "cam.{start}.mp4"))
    biggest = max(os.path.getsize(p) for _, p in pairs)
    assert all(size <= budget + 3 * biggest for _, size in samples), (budget, biggest, samples)
    removed = snap.retention["outputs"]
    assert removed.removed_files >= 15 and removed.kept_bytes <= budget + 3 * biggest
    assert "retention outputs: removed" in summary_table(snap)
    rss = [r for r, _ in samples[12:]]  # after a 12 s warm-up: about 12 segments written, most removed
    quarter = len(rss) // 4
    # plain MP4 indexes bounded by the segment: no growth with time. The test shares its
    # process with the suite (a loaded machine fills bounded queues once, a step): the
    # last quarter is where the third one ended, and the whole stays within a few frames
    third, last = rss[2 * quarter:3 * quarter], rss[3 * quarter:]
    assert max(last) - max(third) < 4 and max(rss) - min(rss) < 32, [r for r, _ in samples]


def test_retention_removes_only_what_the_run_wrote_for_its_cameras(tmp_path, slow_clip, model_path, write_config):
    """The hostile round's folder: the user's files, another camera's segment, a symlink to
    a big file outside, look-alikes under events/; a segment of this camera from an earlier
    run is in the run's record and goes with the run's own old segments."""
    from pipeline.sinks.written import WrittenIndex

    out, outside = tmp_path / "out", tmp_path / "outside"
    planted = {"holiday.mp4": 5000, "mydata.jsonl": 5000, "sub/wedding.jpg": 5000,
               "oldcam.20200101T000000Z.mp4": 5000, "events/holiday.jpg": 5000,
               "events/cam/my-own-clip.mp4": 5000, "events/othercam/20200101T000000.000Z_1.jpg": 5000,
               "cam.20200101T000000Z.mp4": 5000}  # the last one: an earlier run's, in the record
    for name, size in planted.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(b"x" * size)
    WrittenIndex(str(out)).add("cam", str(out / "cam.20200101T000000Z.mp4"))
    outside.mkdir()
    (outside / "big.bin").write_bytes(b"x" * 10**6)
    os.symlink(outside / "big.bin", out / "link.mp4")
    config = looping(slow_clip, model_path, out, video={"segment_s": 1}, retain={"max_gb": 1e-9},
                     events={"retain": {"max_gb": 1e-9}})
    snap, _ = run_for(config, write_config, 5)
    assert not (out / "cam.20200101T000000Z.mp4").exists()
    survivors = [name for name in planted if name != "cam.20200101T000000Z.mp4"]
    assert all((out / name).exists() for name in survivors), [n for n in survivors if not (out / n).exists()]
    assert os.path.islink(out / "link.mp4") and (outside / "big.bin").stat().st_size == 10**6
    assert len(segment_files(str(out / "cam.{start}.mp4"))) <= 2  # the newest (and one cut after the last sweep)
    assert snap.retention["outputs"].removed_files >= 5  # the earlier run's and 2 pairs of this run's
