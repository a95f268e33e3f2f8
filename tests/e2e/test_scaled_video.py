"""The annotated video at the size and rate you watch, end to end on a 1080p camera: drawn
on a scaled copy at its own rate while every frame reaches the JSON lines in full-size
pixels; with the video off and nobody watching, no frame is converted to BGR."""
from __future__ import annotations

import av
import numpy as np
import pytest

from conftest import detector_model, read_jsonl, run_pipeline
from synthetic import Mover, picture, render

from pipeline.drawing import class_color


@pytest.fixture(scope="module")
def clip_1080p(tmp_path_factory) -> str:
    """2 s of a person crossing a 1080p picture at 10 fps."""
    path = str(tmp_path_factory.mktemp("clip") / "person1080.mp4")
    render([Mover(picture("astronaut", 500), (100, 300), (1200, 400))], path, frames=20, size=(1920, 1080), fps=10)
    return path


@pytest.fixture
def converted(monkeypatch) -> list[bool]:
    """Whether each frame had been converted to BGR when its camera's files got it."""
    from pipeline.sinks.camera_files import CameraOutputs

    seen: list[bool] = []
    write = CameraOutputs.write

    def spy(self, frame):
        write(self, frame)
        seen.append(frame.converted)

    monkeypatch.setattr(CameraOutputs, "write", spy)
    return seen


def test_a_1080p_camera_is_annotated_at_540_lines_and_5_fps_with_every_frame_in_the_json_lines(
        clip_1080p, model_path, write_config, tmp_path, converted):
    cfg = {"sources": [{"id": "cam", "uri": clip_1080p}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}, "annotate"],
           "outputs": {"video": {"max_height": 540, "fps": 5}}}
    snap = run_pipeline(cfg, write_config, str(tmp_path / "out"))
    assert snap.cameras["cam"].processed == 20
    rows = read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
    assert [r["seq"] for r in rows] == list(range(20))
    with av.open(str(tmp_path / "out" / "cam.mp4")) as c:
        video = [(f.time, f.to_ndarray(format="bgr24")) for f in c.decode(video=0)]
    assert [round(t, 3) for t, _ in video] == [round(0.2 * i, 3) for i in range(10)]  # every second frame
    assert all(image.shape == (540, 960, 3) for _, image in video)
    drawn = 0
    for (t, image), row in zip(video, rows[::2]):
        person = [d for d in row["detections"] if d["class"] == "person"]
        assert person and max(d["box"][3] for d in person) > 540  # the JSON lines keep full-size pixels
        x1, y1, x2, _ = (round(v / 2) for v in person[0]["box"])
        edge = image[max(0, y1 - 1):y1 + 2, (x1 + x2) // 2].astype(int)
        drawn += bool((np.abs(edge - class_color(person[0]["class_id"])).max(axis=1) < 60).any())
    assert drawn >= 9  # the boxes are drawn where the scaled picture shows them
    assert len(converted) == 20 and not any(converted)  # the scaled copies came from the decoded pictures


def test_with_the_video_off_and_nobody_watching_no_frame_is_converted(clip_1080p, model_path, write_config, tmp_path,
                                                                      converted):
    cfg = {"sources": [{"id": "cam", "uri": clip_1080p}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}, "annotate"], "outputs": {"video": {"enabled": False}}}
    run_pipeline(cfg, write_config, str(tmp_path / "out"))
    assert len(read_jsonl(str(tmp_path / "out" / "detections.jsonl"))) == 20
    assert len(converted) == 20 and not any(converted)
