"""Line crossings and zones on tracked boxes with known paths."""
import numpy as np
import pytest

from pipeline.config import ConfigError
from pipeline.frames import Detections, Frame
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import RunControl
from pipeline.stages.analytics import AnalyticsStage, Line

LABELS = ["person", "car"]


def stage(spec: dict) -> AnalyticsStage:
    return AnalyticsStage("analytics", {"cameras": {"cam": spec}}, "graph[2].analytics", LABELS, ["cam"], Metrics(),
                          RunControl(), 4)


def frame(seq: int, rows: list[tuple[int, int, list[float]]]) -> Frame:
    det = Detections(xyxy=np.array([r[2] for r in rows], np.float32).reshape(-1, 4),
                     score=np.ones(len(rows), np.float32), class_id=np.array([r[1] for r in rows], np.int64),
                     track_id=np.array([r[0] for r in rows], np.int64))
    return Frame("cam", seq, seq, None, np.zeros((10, 10, 3), np.uint8), 0.0, detections=det)


def walk(s: AnalyticsStage, track: int, cls: int, xs: list[float], y: float = 100) -> list[dict]:
    events = []
    for i, x in enumerate(xs):
        f = frame(i, [(track, cls, [x - 10, y - 50, x + 10, y])])
        s.process(f)
        events += f.events
    return events


def test_line_direction_follows_the_left_to_right_rule():
    line = Line("l", np.array([100, 0], np.float32), np.array([100, 200], np.float32), None)
    # facing from (100,0) to (100,200) (down the image), the right-hand side is x < 100
    assert line.crossed(np.array([150, 50]), np.array([50, 50])) == "in"
    assert line.crossed(np.array([50, 50]), np.array([150, 50])) == "out"
    assert line.crossed(np.array([150, 250]), np.array([50, 250])) is None  # beside the segment
    assert line.crossed(np.array([150, 50]), np.array([120, 50])) is None


def test_each_crossing_is_counted_once_in_its_direction():
    s = stage({"lines": [{"name": "gate", "points": [[100, 0], [100, 200]]}]})
    events = walk(s, 7, 0, [40, 70, 95, 100, 130, 160])
    assert [(e["event"], e["direction"], e["track"], e["class"]) for e in events] == [("cross", "out", 7, "person")]
    events = walk(s, 8, 1, [160, 120, 80])
    assert [e["direction"] for e in events] == ["in"]
    counts = s.metrics.camera("cam").counts
    assert counts["gate.out.person"] == 1 and counts["gate.in.car"] == 1


def test_line_class_filter():
    s = stage({"lines": [{"name": "gate", "points": [[100, 0], [100, 200]], "classes": ["car"]}]})
    assert walk(s, 1, 0, [50, 150]) == []


def test_zone_entries_exits_and_inside():
    s = stage({"zones": [{"name": "lot", "polygon": [[0, 0], [100, 0], [100, 200], [0, 200]]}]})
    events = walk(s, 3, 1, [150, 90, 50, 120])
    assert [e["event"] for e in events] == ["enter", "exit"]
    assert s.cameras["cam"].zones[0].inside == {}


def test_bad_analytics_config_names_the_path():
    with pytest.raises(ConfigError) as e:
        stage({"lines": [{"name": "x", "points": [[0, 0]], "classes": ["dragon"]}]})
    text = str(e.value)
    assert "graph[2].analytics.cameras.cam.lines[0].points: expected 2 [x, y] points" in text
    assert "unknown class 'dragon'" in text


def test_overlay_draws_lines_and_zones():
    s = stage({"lines": [{"name": "gate", "points": [[5, 0], [5, 60]]}],
               "zones": [{"name": "lot", "polygon": [[10, 10], [50, 10], [50, 50]]}]})
    img = np.zeros((64, 64, 3), np.uint8)
    s.overlay(img, frame(0, []))
    assert img[30, 5].any() and img[10, 30].any()
