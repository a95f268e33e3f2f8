"""One frame's detections from its overlapping regions: an object seen whole twice is one
box; a part cut by one region's border goes where the whole box holds it (containment);
distinct objects and parts without a whole stay."""
import numpy as np

from pipeline.decoders.merge import merge_regions
from pipeline.frames import ClassNames, Detections

NAMES = ClassNames(["person", "car"])
FRAME = (1920, 1080)
A = np.array([0, 0, 416, 416], np.float32)     # region a, at the frame's corner
B = np.array([300, 0, 716, 416], np.float32)   # region b, overlapping a


def dets(*rows) -> Detections:
    arr = np.array(rows, np.float32).reshape(-1, 6)
    return Detections(arr[:, :4], arr[:, 4], arr[:, 5].astype(np.int64), NAMES)


def test_an_object_whole_in_two_regions_is_one_box():
    merged = merge_regions([dets([320, 100, 380, 250, 0.9, 0]), dets([321, 101, 381, 251, 0.8, 0])],
                           np.stack([A, B]), FRAME, 0.45)
    assert len(merged) == 1 and merged.score[0] == np.float32(0.9)


def test_a_part_cut_by_a_regions_border_is_dropped_for_the_whole_box_that_holds_it():
    part = [370, 100, 416, 250, 0.95, 0]  # a's right border (x 416, not the frame's edge) cuts it
    whole = [370, 100, 450, 250, 0.7, 0]   # its IoU with the part is 0.58: NMS at 0.7 keeps both
    merged = merge_regions([dets(part), dets(whole)], np.stack([A, B]), FRAME, 0.7)
    assert len(merged) == 1 and merged.xyxy[0, 2] == 450


def test_distinct_objects_and_a_part_without_its_whole_stay():
    merged = merge_regions([dets([10, 10, 60, 150, 0.9, 0], [370, 100, 416, 250, 0.6, 1]),
                            dets([600, 100, 700, 200, 0.8, 1])], np.stack([A, B]), FRAME, 0.45)
    assert len(merged) == 3


def test_a_box_at_the_frames_edge_is_not_cut():
    part = [0, 100, 40, 250, 0.9, 0]  # at a's left border, which is the frame's edge
    inner = [0, 100, 60, 250, 0.5, 0]
    merged = merge_regions([dets(part), dets(inner)], np.stack([A, B]), FRAME, 0.9)
    assert len(merged) == 2
