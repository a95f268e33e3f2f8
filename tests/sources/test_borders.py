"""Where events are decided: a camera's lines and zone edges, and which moving tracks are
about to cross one of them (or have just crossed it) at their speed across it."""
import numpy as np

from pipeline.config.stages import CameraAnalyticsSpec, LineSpec, ZoneSpec
from pipeline.frames import ClassNames
from pipeline.sources.borders import Borders

NAMES = ClassNames(["person", "bicycle", "car"])


def borders() -> Borders:
    """A vertical line for people at x = 100, and a car park reaching the frame's right and bottom edges."""
    return Borders.of(CameraAnalyticsSpec(
        lines=[LineSpec(name="door", points=[(100, 0), (100, 200)], classes=["person"])],
        zones=[ZoneSpec(name="park", polygon=[(300, 300), (639, 300), (639, 479), (300, 479)])]), NAMES)


def near(b: Borders, box, velocity, cls=0, within_s=0.5) -> bool:
    return b.near(np.array([box], np.float32), np.array([velocity], np.float32), np.array([cls]), within_s)


def test_a_camera_has_its_lines_and_each_edge_of_its_zones_with_the_classes_they_count():
    b = borders()
    assert b.segments.shape == (5, 2, 2)
    assert b.counts.tolist() == [[True] * 5, [False, True, True, True, True]]  # people; any other class
    assert not Borders.of(None, NAMES) and not Borders.of(CameraAnalyticsSpec(), NAMES)


def test_a_polygon_closed_by_hand_makes_no_edge_of_its_repeated_point():
    square = [(300, 300), (400, 300), (400, 400), (300, 400)]
    closed = Borders.of(CameraAnalyticsSpec(zones=[ZoneSpec(name="z", polygon=[*square, square[0]])]), NAMES)
    assert closed.segments.shape == (4, 2, 2)
    assert not near(closed, (0, 0, 10, 10), (1, 0))  # far away: not at the zone (a zero-length edge was everywhere)


def test_a_track_counts_as_at_the_border_within_border_s_of_it_before_or_after_at_its_speed_across_it():
    b = borders()
    # the anchor (bottom centre) at x = 80, walking right at 50 px/s: 0.4 s from the line
    assert near(b, (70, 50, 90, 100), (50, 0))
    assert near(b, (110, 50, 130, 100), (50, 0))  # crossed it 0.4 s ago
    assert not near(b, (40, 50, 60, 100), (50, 0))  # 0.9 s away
    assert near(b, (40, 50, 60, 100), (50, 0), within_s=1.0)
    assert near(b, (80, 165, 100, 215), (20, -40))  # below the line's end now, across it in 0.5 s (at y = 195)
    assert not near(b, (80, 170, 100, 220), (20, 40))  # across the line's end's extension: beside the line


def test_walking_along_a_line_beside_its_ends_or_of_a_class_it_does_not_count_is_not_at_it():
    b = borders()
    assert not near(b, (85, 50, 105, 100), (0, 80))  # on the line, along it: never crosses
    assert not near(b, (70, 250, 90, 300), (50, 0))  # below the line's end
    assert not near(b, (70, 50, 90, 100), (50, 0), cls=2)  # a car: the line counts people
    assert near(b, (370, 250, 390, 290), (0, 50), cls=2)  # the car park's edge counts every class


def test_zone_edges_along_the_pictures_left_top_and_right_edges_are_not_watched():
    inside = borders().within(640, 480)
    assert inside.segments.shape == (4, 2, 2)  # the line; the park's top, left and bottom edges
    assert not near(inside, (600, 400, 638, 470), (100, 0))  # driving out at the right: no border to cross
    assert near(borders(), (600, 400, 638, 470), (100, 0))
    assert near(inside, (350, 420, 390, 480), (0, -40))  # cut off by the bottom: its anchor is on that edge


def test_motion_touches_a_border_where_a_box_overlaps_a_segment_not_where_it_only_comes_near():
    b = borders()
    assert b.touched(np.array([[90, 50, 110, 60]], np.float32))  # across the line
    assert b.touched(np.array([[0, 0, 640, 480]], np.float32))  # everything
    assert not b.touched(np.array([[110, 50, 130, 60], [90, 210, 110, 230]], np.float32))  # beside it, below its end
    assert b.touched(np.array([[350, 290, 360, 310]], np.float32))  # the car park's top edge
    assert not b.touched(np.array([[350, 310, 360, 320]], np.float32))  # inside the park, off its edges
    assert not b.touched(np.zeros((0, 4), np.float32))
