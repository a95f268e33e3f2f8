"""Line crossings and zones on tracked boxes with known paths: one count per real
crossing, none for a track jittering on a line or a zone edge."""
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import ConfigError, parse_config
from pipeline.config.schema import Reader
from pipeline.config.stages import AnalyticsSpec, LineSpec
from pipeline.drawing import draw_analytics
from pipeline.frames import ClassNames, Detections, EndOfStream, Event, Frame
from pipeline.metrics.registry import Metrics
from pipeline.stages.analytics import AnalyticsStage, Line

NAMES = ClassNames(["person", "car"])


def stage(spec: dict, forget_after: int = 30) -> AnalyticsStage:
    r = Reader(Path("."))
    parsed = r.record(AnalyticsSpec, {"cameras": {"cam": spec}}, "graph[2].analytics")
    assert not r.problems, r.problems
    parsed.forget_after = forget_after
    return AnalyticsStage(parsed, NAMES, Metrics())


def frame(seq: int, rows: list[tuple[int, int, list[float]]]) -> Frame:
    det = Detections(xyxy=np.array([r[2] for r in rows], np.float32).reshape(-1, 4),
                     score=np.ones(len(rows), np.float32), class_id=np.array([r[1] for r in rows], np.int64),
                     names=NAMES, track_id=np.array([r[0] for r in rows], np.int64))
    return Frame("cam", seq, seq, None, np.zeros((10, 10, 3), np.uint8), 0.0, detections=det, detected=True)


def walk(s: AnalyticsStage, track: int, cls: int, xs: list[float], y: float = 100, start: int = 0) -> list[Event]:
    """A track whose bottom centre goes through `xs` (one per frame) at height `y`."""
    events = []
    for i, x in enumerate(xs):
        f = frame(start + i, [(track, cls, [x - 10, y - 50, x + 10, y])])
        s.process(f)
        events += f.events
    return events


VERTICAL = {"name": "gate", "points": [[100, 0], [100, 200]]}


def test_line_sides_follow_the_left_to_right_rule():
    line = Line(LineSpec(name="l", points=[(100, 0), (100, 200)]))
    # facing from (100,0) to (100,200) (down the image), the right-hand side is x < 100
    assert line.locate(np.array([50, 50]))[0] is True and line.locate(np.array([150, 50]))[0] is False
    assert line.locate(np.array([130, 50]))[1] == pytest.approx(30)
    assert line.through(np.array([150, 50]), np.array([50, 50]))
    assert not line.through(np.array([150, 250]), np.array([50, 250]))  # beside the segment


def test_a_walk_across_counts_once_in_its_direction():
    s = stage({"lines": [VERTICAL]})
    events = walk(s, 7, 0, [40, 70, 95, 100, 130, 160, 190, 220])
    assert [(e.event, e.direction, e.track, e.cls) for e in events] == [("cross", "out", 7, "person")]
    events = walk(s, 8, 1, [160, 120, 80, 60, 40, 20])
    assert [e.direction for e in events] == ["in"]
    assert dict(s.metrics.camera("cam").counts) == {("gate", "out", "person"): 1, ("gate", "in", "car"): 1}


def jitter(around: float, frames: int, seed: int) -> list[float]:
    """Positions hopping across `around` every frame or two, a few pixels each way (a
    box's bottom edge on a person standing still)."""
    rng = np.random.default_rng(seed)
    xs: list[float] = []
    side = 1
    while len(xs) < frames:
        xs += [around + side * rng.uniform(1, 6) for _ in range(rng.integers(1, 3))]
        side = -side
    return xs[:frames]


def test_a_track_jittering_on_the_line_counts_once():
    """A person standing on the line for 40 frames, then walking off to the other side."""
    s = stage({"lines": [VERTICAL]})
    events = walk(s, 1, 0, [60.0, 80.0] + jitter(100, 40, seed=3) + [120, 140, 160, 180])
    assert [e.direction for e in events] == ["out"]


def test_going_back_before_it_counts_cancels_the_crossing():
    s = stage({"lines": [VERTICAL]})
    assert walk(s, 1, 0, [60, 90, 110, 115, 90, 70, 60, 50]) == []


def test_min_distance_counts_a_fast_object_at_once():
    s = stage({"lines": [{**VERTICAL, "min_frames": 10, "min_distance": 40}]})
    events = walk(s, 1, 0, [20, 60, 150])  # gone after 1 frame on the new side, but far past the line
    assert [(e.direction, e.seq) for e in events] == [("out", 2)]


def test_a_step_beside_the_segment_is_no_crossing():
    s = stage({"lines": [VERTICAL]})
    assert walk(s, 1, 0, [40, 80, 120, 160, 200], y=300) == []


def test_line_class_filter():
    s = stage({"lines": [{**VERTICAL, "classes": ["car"]}]})
    assert walk(s, 1, 0, [50, 150, 160, 170, 180]) == []


def test_zone_enter_exit_and_jitter_on_its_edge():
    s = stage({"zones": [{"name": "lot", "polygon": [[0, 0], [100, 0], [100, 200], [0, 200]]}]})
    events = walk(s, 3, 1, [150, 120, 90, 60, 50, 40, 120, 150, 160, 170])
    assert [e.event for e in events] == ["enter", "exit"]
    assert s.cameras["cam"].zones[0].inside == {}
    assert walk(s, 4, 1, [140, 120] + jitter(100, 30, seed=5), start=20) == []


def test_counts_travel_with_the_frame():
    s = stage({"lines": [VERTICAL], "zones": [{"name": "lot", "polygon": [[0, 0], [100, 0], [100, 200], [0, 200]]}]})
    walk(s, 1, 0, [150, 130, 110, 90, 70, 50, 30])
    f = frame(7, [(1, 0, [20, 50, 40, 100])])
    s.process(f)
    assert [(ln.name, ln.into, ln.out) for ln in f.lines] == [("gate", 1, 0)]
    assert [(z.name, z.inside) for z in f.zones] == [("lot", 1)]
    later = frame(8, [])
    s.process(later)
    assert f.lines[0].into == 1 and later.lines[0].into == 1  # a frame keeps its own numbers


def test_a_track_gone_longer_than_the_trackers_max_age_is_forgotten():
    s = stage({"zones": [{"name": "lot", "polygon": [[0, 0], [100, 0], [100, 200], [0, 200]]}]}, forget_after=5)
    walk(s, 1, 0, [50, 50, 50, 50])
    assert s.cameras["cam"].zones[0].inside == {1: "person"}
    for seq in range(4, 12):
        s.process(frame(seq, []))
    assert s.cameras["cam"].zones[0].inside == {}


def test_the_forget_window_counts_updates_not_frames_with_a_stride():
    """With `stride: 3`, seq advances by 3 per update: a track unseen for 4 updates (12
    frames) is within a window of 5, one unseen for 6 updates is gone."""
    s = stage({"zones": [{"name": "lot", "polygon": [[0, 0], [100, 0], [100, 200], [0, 200]]}]}, forget_after=5)
    for seq in (0, 3, 6, 9):
        s.process(frame(seq, [(1, 0, [40, 50, 60, 100])]))
    assert s.cameras["cam"].zones[0].inside == {1: "person"}
    for seq in (12, 15, 18, 21):
        s.process(frame(seq, []))
    assert s.cameras["cam"].zones[0].inside == {1: "person"}  # 4 updates unseen: the tracker holds it still
    for seq in (24, 27):
        s.process(frame(seq, []))
    assert s.cameras["cam"].zones[0].inside == {}


def test_a_person_hidden_for_45_frames_with_stride_3_keeps_its_zone_visit():
    """The real tracker and the analytics stage in a row on every 3rd frame: a person
    stands in a zone, is hidden for 45 frames (15 updates, within the tracker's `max_age`
    of 30) and reappears at the same place under the same id: still one visit, never a
    second `enter` without an `exit`."""
    from pipeline.config import TrackSpec
    from pipeline.stages.track import TrackStage

    track_spec = TrackSpec(stationary_s=60.0)  # (it stands still: not long enough to be stationary)
    tracker = TrackStage(track_spec, Metrics())
    s = stage({"zones": [{"name": "lot", "polygon": [[0, 0], [300, 0], [300, 300], [0, 300]]}]},
              forget_after=track_spec.max_age)
    events, ids = [], set()
    for seq in range(0, 150, 3):
        hidden = 30 <= seq < 75
        rows = [] if hidden else [(0, 0, [100, 100, 140, 200])]
        f = frame(seq, rows)
        f.detections.track_id = None
        (f,) = tracker.process(f)
        ids |= set(f.detections.track_id.tolist())
        s.process(f)
        events += [(e.event, e.track) for e in f.events]
    assert ids == {1}
    assert events == [("enter", 1)]
    assert s.cameras["cam"].zones[0].inside == {1: "person"}


def test_a_camera_added_again_after_its_end_counts_afresh():
    s = stage({"lines": [VERTICAL]})
    assert len(walk(s, 1, 0, [150, 130, 110, 90, 70, 50, 30])) == 1
    s.end(EndOfStream("cam", 7))
    events = walk(s, 1, 0, [150, 130, 110, 90, 70, 50, 30])  # the same id, running again
    assert len(events) == 1
    f = frame(7, [])
    s.process(f)
    assert [(ln.into, ln.out) for ln in f.lines] == [(1, 0)]


def test_bad_analytics_config_names_the_path(write_config, model_path, sample_path):
    from conftest import detector_model

    cfg = {"sources": [{"id": "cam", "uri": sample_path("bikes.mp4")}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}, "track", {"analytics": {"cameras": {
               "cam": {"lines": [{"name": "x", "points": [[0, 0]], "classes": ["dragon"]},
                                 {"name": "x", "points": [[5, 5], [5, 5]]}],
                       "zones": [{"name": "z", "polygon": [[0, 0], [1, 1]], "min_frames": 0}]},
               "nowhere": {}}}}]}
    with pytest.raises(ConfigError) as e:
        parse_config(cfg, Path(write_config(cfg)).parent)
    problems = e.value.problems
    assert "graph[2].analytics.cameras.cam.lines[0].points: expected 2 [x, y] points" in problems
    assert "graph[2].analytics.cameras.cam.lines[0].classes[0]: unknown detector class 'dragon'" in problems
    assert "graph[2].analytics.cameras.cam.lines[1].points: the two points are the same: a line needs a length" \
        in problems
    assert "graph[2].analytics.cameras.cam.lines[1].name: duplicate name 'x' on this camera" in problems
    assert "graph[2].analytics.cameras.cam.zones[0].polygon: expected 3 or more [x, y] points" in problems
    assert "graph[2].analytics.cameras.cam.zones[0].min_frames: must be > 0, got 0" in problems
    assert "graph[2].analytics.cameras.nowhere: no camera with this id" in problems


def test_the_forget_window_follows_the_trackers_max_age(write_config, model_path, sample_path):
    from conftest import detector_model

    cfg = {"sources": [{"id": "cam", "uri": sample_path("bikes.mp4")}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}, {"track": {"max_age": 60}}, {"analytics": {"cameras": {}}}]}
    config = parse_config(cfg, Path(write_config(cfg)).parent)
    assert config.graph[2].forget_after == 60


def test_lines_and_zones_are_drawn_from_the_frame():
    s = stage({"lines": [{"name": "gate", "points": [[5, 0], [5, 60]]}],
               "zones": [{"name": "lot", "polygon": [[10, 10], [50, 10], [50, 50]]}]})
    f = frame(0, [])
    s.process(f)
    img = np.zeros((64, 64, 3), np.uint8)
    draw_analytics(img, f)
    assert img[30, 5].any() and img[10, 30].any()


def tracked(seq: int, track: int, x: float, y: float = 100, predicted: bool = False,
            stationary: bool = False) -> Frame:
    f = frame(seq, [(track, 0, [x - 10, y - 50, x + 10, y])])
    f.detections.predicted, f.detections.stationary = np.array([predicted]), np.array([stationary])
    return f


def test_a_predicted_box_never_confirms_a_crossing_the_next_detection_does_at_its_real_place():
    s = stage({"lines": [VERTICAL]})
    events = []
    path = [(40, False), (70, False), (130, True), (160, True), (190, True), (200, True)]  # predicted across
    for seq, (x, predicted) in enumerate(path):
        f = tracked(seq, 3, x, predicted=predicted)
        s.process(f)
        events += f.events
    assert events == []
    for seq, x in enumerate([150, 170, 190], start=len(path)):  # detected on the far side: counts there
        f = tracked(seq, 3, x)
        s.process(f)
        events += [(e.event, e.direction, e.seq) for e in f.events]
    assert events == [("cross", "out", 8)]


LOT = {"name": "lot", "polygon": [[0, 0], [300, 0], [300, 300], [0, 300]]}


def test_a_parked_object_is_one_enter_then_one_stationary_state_and_moving_when_it_goes_on():
    s = stage({"zones": [LOT]})
    events = []
    rows = [(350, False, False), (250, False, False), (200, False, False), (150, False, False)]  # drives in
    rows += [(150, True, True)] * 200 + [(150, False, False), (120, False, False)]  # parks (kept), then leaves
    for seq, (x, predicted, still) in enumerate(rows):
        f = tracked(seq, 5, x, predicted=predicted, stationary=still)
        s.process(f)
        events += [e.event for e in f.events]
        if seq == 100:
            assert [(z.inside, z.stationary) for z in f.zones] == [(1, 1)]
            assert s.metrics.camera("cam").stationary == {"lot": 1}
    assert events == ["enter", "stationary", "moving"]
    assert s.metrics.camera("cam").counts[("lot", "stationary", "person")] == 1


def test_a_zone_that_does_not_alert_on_stationary_objects_still_counts_them():
    s = stage({"zones": [{**LOT, "alert_stationary": False}]})
    events = []
    for seq, still in enumerate([False, False, False, True, True]):
        f = tracked(seq, 5, 150, stationary=still)
        s.process(f)
        events += [e.event for e in f.events]
    assert events == ["enter"] and s.metrics.camera("cam").stationary == {"lot": 1}


def test_frames_the_detector_did_not_see_count_as_time_on_the_new_side():
    """Detected every fifth frame (the others predicted): the crossing counts at the first
    detection at least `min_frames` frames after the first one on the far side."""
    s = stage({"lines": [VERTICAL]})
    events = []
    for seq in range(25):
        x = 40 + 8 * seq
        f = tracked(seq, 4, x, predicted=seq % 5 != 0)
        s.process(f)
        events += [(e.event, e.direction, e.seq) for e in f.events]
    assert events == [("cross", "out", 15)]  # first seen past x 100 at frame 10, confirmed 5 frames later


def test_a_crossing_made_before_the_tracker_confirmed_the_track_counts_from_its_first_detection():
    """The tracker gives an id only after a few detections; one who crossed meanwhile first
    shows on the far side. Its first detected box (`Detections.origin`) is where it was first
    seen: from there the crossing counts, once it has stayed `min_frames` over there."""
    def confirmed_at(x: float, origin_x: float | None, seq: int) -> Frame:
        f = tracked(seq, 5, x)
        if origin_x is not None:
            f.detections.origin = np.array([[origin_x - 10, 50, origin_x + 10, 100]], np.float64)
        return f

    for origin, expected in ((60.0, ["out"]), (None, []), (np.nan, [])):  # NaN: no origin known for the row
        s = stage({"lines": [VERTICAL]})
        events = []
        for seq, x in enumerate([130, 150, 170, 190]):
            f = confirmed_at(x, origin if seq == 0 else 175.0, seq)  # later rows' origins are never read
            s.process(f)
            events += [e.direction for e in f.events]
        assert events == expected, origin
