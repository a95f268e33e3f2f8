"""Recordings of what the cameras sent, end to end: the source's own packets in segments
cut on keyframes, every JSON line pointing into them, boxes drawn from the JSON lines
over the recording agreeing with the annotated video, event clips cut from the
recording, and a sub-stream analysed while the main stream is only recorded."""
from __future__ import annotations

import os

import av
import numpy as np
import pytest

from conftest import detector_model, read_jsonl, run_pipeline, video_frames
from recordings import frames_by_time, null_detector, packets, segments, times
from synthetic import Mover, picture, render

FPS = 8
BFRAMES = ("libx264", {"bf": "2", "g": str(FPS), "preset": "ultrafast", "crf": "28"})  # a keyframe a second


@pytest.fixture(scope="module")
def clip_1080p(tmp_path_factory) -> str:
    """Three seconds of 1080p at 8 fps with B-frames, a keyframe every second."""
    path = str(tmp_path_factory.mktemp("rec") / "hd.mp4")
    render([Mover(picture("chelsea", 300), (40, 300), (1400, 500))], path, frames=3 * FPS, size=(1920, 1080),
           fps=FPS, codec=BFRAMES)
    return path


@pytest.fixture(scope="module")
def cat_clip(tmp_path_factory) -> tuple[str, list]:
    """A cat crossing a small picture, with B-frames: (clip, its boxes per frame)."""
    path = str(tmp_path_factory.mktemp("rec") / "cat.mp4")
    truth = render([Mover(picture("chelsea", 110), (10, 70), (300, 90))], path, frames=2 * FPS, size=(480, 272),
                   fps=FPS, codec=("libx264", {"bf": "2", "g": str(FPS), "crf": "16"}))
    return path, truth


def recorded_config(uri: str, model: dict, **outputs) -> dict:
    return {"sources": [{"id": "cam", "uri": uri}], "models": {"det": model}, "graph": [{"detect": {"model": "det"}}],
            "outputs": {"video": {"enabled": False}, "jsonl": {"filename": "{camera}.jsonl"},
                        "record": {"enabled": True, "segment_s": 1}, **outputs}}


def assert_rows_point_into_the_recording(out: str, rows: list[dict]) -> None:
    """Every row names a recording file that exists and the time of one of its pictures."""
    shown = {}
    for row in rows:
        assert row["recording"], row
        path = os.path.join(out, row["recording"])
        if path not in shown:
            assert os.path.isfile(path), row["recording"]
            shown[path] = {round(float(t), 6) for t in times(path)}
        assert row["recording_time"] in shown[path], (row["seq"], row["recording_time"], sorted(shown[path])[:5])


def test_a_1080p_file_cameras_recording_is_its_own_packets_byte_for_byte_cut_on_keyframes(tmp_path, clip_1080p,
                                                                                            write_config):
    out = str(tmp_path / "out")
    snap = run_pipeline(recorded_config(clip_1080p, null_detector(tmp_path)), write_config, out)
    files = segments(out, "cam")
    source = packets(clip_1080p)
    assert len(files) == 3  # one a second: cut at each keyframe after a boundary
    written = [packets(f) for f in files]
    assert [p for seg in written for p in seg] == source  # same bytes, same count, same order
    assert all(seg[0][1] for seg in written)  # each segment starts on a keyframe
    for path in files:
        assert times(path)[0] > 0  # each file starts at 0: its first picture is shown after the B-frame delay
    rows = read_jsonl(os.path.join(out, "cam.jsonl"))
    assert len(rows) == len(source)
    assert_rows_point_into_the_recording(out, rows)
    rec = snap.cameras["cam"].recording
    assert rec is not None and rec.state == "ended" and rec.segments == 3 and rec.packets == len(source)
    assert rec.bytes == sum(len(b) for b, _ in source) and rec.dropped == 0 and rec.gaps == 0
    assert rec.file == os.path.basename(files[-1])


def draw_row(image: np.ndarray, row: dict, names: list[str]) -> np.ndarray:
    """The row's boxes drawn the way the annotate stage draws them."""
    from pipeline.drawing import draw
    from pipeline.frames import ClassNames, Detections, Frame

    det = row["detections"]
    frame = Frame("cam", row["seq"], None, None, image.copy(), 0.0)
    frame.detections = Detections(np.array([d["box"] for d in det], np.float32).reshape(-1, 4),
                                  np.array([d["score"] for d in det], np.float32),
                                  np.array([d["class_id"] for d in det], np.int64), ClassNames(names))
    draw(frame.image, frame)
    return frame.image


def footprint(drawn: np.ndarray, plain: np.ndarray) -> np.ndarray:
    """Where the drawing changed the picture."""
    return np.abs(drawn.astype(int) - plain.astype(int)).max(axis=2) > 40


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    return (a & b).sum() / max(1, (a | b).sum())


def test_boxes_drawn_from_the_json_lines_over_the_recording_match_the_annotated_video(tmp_path, cat_clip, model_path,
                                                                                     coco_labels, write_config):
    """Frame by frame: a row's boxes drawn over the recording's picture at the row's time
    leave the same marks as the annotated video's frame of that row; the picture a frame
    earlier or later does not line up (the cat moves 20 pixels a frame)."""
    clip, _ = cat_clip
    out = str(tmp_path / "out")
    cfg = recorded_config(clip, detector_model(model_path), video={"enabled": True})
    cfg["graph"].append("annotate")
    run_pipeline(cfg, write_config, out)
    rows = read_jsonl(os.path.join(out, "cam.jsonl"))
    annotated = video_frames(os.path.join(out, "cam.mp4"))
    pictures = {name: frames_by_time(os.path.join(out, name)) for name in {r["recording"] for r in rows}}
    assert len(annotated) == len(rows) == 2 * FPS
    assert sum(1 for r in rows if r["detections"]) >= len(rows) - 2, "the detector sees the cat"
    for i, row in enumerate(rows):
        if not row["detections"]:
            continue
        plain = pictures[row["recording"]][row["recording_time"]]
        mine = footprint(draw_row(plain, row, coco_labels), plain)
        theirs = footprint(annotated[i], plain)
        assert overlap(mine, theirs) > 0.6, f"row {i}: the boxes over the recording miss the annotated video's"
        for j in (i - 1, i + 1):
            if 0 <= j < len(rows):
                assert overlap(footprint(annotated[j], plain), theirs) < overlap(mine, theirs)


def test_an_event_clip_is_cut_from_the_recording_around_the_events_time(tmp_path, cat_clip, model_path,
                                                                        write_config):
    """The cat crosses a line: the event's clip holds the source's own packets (original
    quality, not the annotated re-encode), from a keyframe at or before `pre_s` ahead of
    the event up to `post_s` after it."""
    clip, truth = cat_clip
    out = str(tmp_path / "out")
    cfg = recorded_config(clip, detector_model(model_path),
                          events={"clips": {"pre_s": 0.5, "post_s": 0.5}})
    cfg["graph"] += [{"track": {}}, {"analytics": {"cameras": {"cam": {"lines": [
        {"name": "middle", "points": [[240, 0], [240, 271]], "min_frames": 1}]}}}}]
    run_pipeline(cfg, write_config, out)
    rows = read_jsonl(os.path.join(out, "cam.jsonl"))
    events = [(r, e) for r in rows for e in r.get("events", [])]
    assert len(events) == 1 and events[0][1]["event"] == "cross"
    row, event = events[0]
    got = packets(os.path.join(out, event["clip"]))
    source = packets(clip)
    start = next(i for i in range(len(source)) if source[i:i + len(got)] == got)  # a run of the source's packets
    assert got[0][1]  # from a keyframe
    with av.open(clip) as c:
        shown = [float(p.pts * p.time_base) for p in c.demux(video=0) if p.size]
    assert shown[start] <= row["time"] - 0.5 < shown[start] + 1.0  # the keyframe at or before pre_s, a GOP at most
    assert max(shown[start:start + len(got)]) >= row["time"] + 0.5 - 1 / FPS  # up to post_s after the event


def iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union


def test_a_sub_stream_is_analysed_while_the_main_stream_is_only_recorded(tmp_path, cat_clip, model_path,
                                                                         write_config):
    """A 480x272 sub-stream of a 960x544 main stream: the main stream's packets are the
    recording, the analysis decodes the sub-stream only (its annotated video has the
    sub-stream's size), and boxes come out in the main stream's pixels, matched by time."""
    clip, truth = cat_clip
    main = str(tmp_path / "main.mp4")
    render([Mover(picture("chelsea", 220), (20, 140), (600, 180))], main, frames=2 * FPS, size=(960, 544),
           fps=FPS, codec=BFRAMES)
    out = str(tmp_path / "out")
    cfg = recorded_config(main, detector_model(model_path), video={"enabled": True})
    cfg["sources"][0]["detect_uri"] = clip
    run_pipeline(cfg, write_config, out)
    assert [p for f in segments(out, "cam") for p in packets(f)] == packets(main)
    with av.open(os.path.join(out, "cam.mp4")) as c:
        assert (c.streams.video[0].width, c.streams.video[0].height) == (480, 272)
    rows = read_jsonl(os.path.join(out, "cam.jsonl"))
    assert_rows_point_into_the_recording(out, rows)
    found = 0
    for row, boxes in zip(rows, truth):
        for box in (d["box"] for d in row["detections"] if d["class"] == "cat"):
            assert iou(box, [v * 2 for v in boxes[0]]) > 0.6, (row["seq"], box, boxes[0])
            found += 1
    assert found >= len(rows) - 2
