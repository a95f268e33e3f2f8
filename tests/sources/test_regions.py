"""Where the detector looks on a frame with motion: squares of at least the model's input
around what moves, inside the frame, as few as the cost rule allows; the whole frame
where squares would not fit or cost more."""
import numpy as np

from pipeline.sources.regions import plan_regions

HD = (1920, 1080)


def inside(box, region) -> bool:
    return region[0] <= box[0] and region[1] <= box[1] and box[2] <= region[2] and box[3] <= region[3]


def test_a_small_motion_gets_one_square_of_the_models_input_around_it():
    box = np.array([[900, 500, 940, 560]], np.float32)
    regions = plan_regions(box, HD, 416, budget=1)
    assert regions is not None and len(regions) == 1
    x1, y1, x2, y2 = regions[0]
    assert x2 - x1 == y2 - y1 == 416 and inside(box[0], regions[0])
    assert x1 % 2 == y1 % 2 == 0


def test_a_region_at_the_frames_edge_is_moved_inside_it():
    regions = plan_regions(np.array([[1900, 1050, 1920, 1080]], np.float32), HD, 416, budget=1)
    assert regions is not None and tuple(regions[0]) == (1504, 664, 1920, 1080)


def test_a_large_motion_gets_a_region_larger_than_the_input_with_a_margin():
    box = np.array([[600, 200, 1000, 800]], np.float32)  # 600 high
    regions = plan_regions(box, HD, 416, budget=1)
    assert regions is not None and regions[0][3] - regions[0][1] >= 1.35 * 600 - 2 and inside(box[0], regions[0])


def test_motions_near_each_other_share_one_region_and_far_apart_need_the_whole_frame_on_a_cpu():
    near = np.array([[900, 500, 940, 560], [1000, 520, 1040, 600], [960, 600, 980, 640]], np.float32)
    regions = plan_regions(near, HD, 416, budget=1)
    assert regions is not None and len(regions) == 1 and all(inside(b, regions[0]) for b in near)
    far = np.array([[100, 100, 150, 200], [1700, 800, 1750, 900]], np.float32)
    assert plan_regions(far, HD, 416, budget=1) is None  # one square would not fit: the whole frame


def test_where_a_batch_of_two_costs_one_run_far_motions_get_a_region_each():
    far = np.array([[100, 100, 150, 200], [1700, 800, 1750, 900]], np.float32)
    regions = plan_regions(far, HD, 416, budget=2)
    assert regions is not None and len(regions) == 2
    assert all(any(inside(b, r) for r in regions) for b in far)


def test_no_region_where_the_frame_is_not_larger_than_the_input_or_the_regions_would_cover_most_of_it():
    box = np.array([[100, 100, 140, 160]], np.float32)
    assert plan_regions(box, (640, 360), 416, budget=1) is None
    wide = np.array([[50, 50, 100, 100], [1000, 1000, 1040, 1040]], np.float32)
    assert plan_regions(wide, (1100, 1080), 416, budget=1) is None  # its square is most of the frame
    assert plan_regions(np.zeros((0, 4), np.float32), HD, 416, budget=1) is None
