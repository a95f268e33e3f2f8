"""Lines and zones replaced while running (a reload): the new ones count from the next
frame, a line moved under its name keeps its counts, an unchanged zone keeps who is inside."""
from pathlib import Path

from pipeline.config.schema import Reader
from pipeline.config.stages import AnalyticsSpec

from stages.test_analytics import VERTICAL, stage, walk

ZONE = {"name": "yard", "polygon": [[0, 0], [400, 0], [400, 200], [0, 200]]}


def spec(cameras: dict) -> AnalyticsSpec:
    r = Reader(Path("."))
    parsed = r.record(AnalyticsSpec, {"cameras": cameras}, "graph[2].analytics")
    assert not r.problems, r.problems
    return parsed


def test_a_moved_line_counts_at_its_new_place_and_keeps_its_counts():
    s = stage({"lines": [VERTICAL]})
    first = walk(s, 1, 0, [60, 80, 120, 140, 160, 180])
    assert [(e.line, e.direction) for e in first] == [("gate", "out")]
    s.update(spec({"cam": {"lines": [{"name": "gate", "points": [[300, 0], [300, 200]]}]}}))
    assert walk(s, 2, 0, [60, 80, 120, 140, 160, 180], start=10) == []  # the old place counts no more
    crossed = walk(s, 3, 0, [260, 280, 320, 340, 360, 380], start=20)
    assert [(e.line, e.direction) for e in crossed] == [("gate", "out")]
    frame_lines = s.cameras["cam"].lines
    assert [(ln.spec.name, ln.counts["out"]) for ln in frame_lines] == [("gate", 2)]  # the count made before stays
    assert s.metrics.camera("cam").counts[("gate", "out", "person")] == 2


def test_a_zone_left_as_it_was_keeps_who_is_inside_and_a_camera_without_analytics_gets_some():
    s = stage({"zones": [ZONE]})
    walk(s, 1, 0, [50, 60, 70, 80])
    assert s.cameras["cam"].zones[0].inside == {1: "person"}
    s.update(spec({"cam": {"zones": [ZONE], "lines": [VERTICAL]}}))
    events = walk(s, 1, 0, [90, 110, 130, 150], start=4)
    assert [e.event for e in events] == ["cross"]  # no second `enter`: the zone went on as it was
    assert s.cameras["cam"].zones[0].inside == {1: "person"}
    s.update(spec({}))
    assert walk(s, 1, 0, [150, 90, 70, 50], start=8) == []  # all taken away: nothing counts
    assert "cam" not in s.cameras
