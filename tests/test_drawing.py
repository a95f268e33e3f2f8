"""Drawing: labels of overlapping objects stay readable, one line per classifier."""
import numpy as np

from pipeline.frames import Attribute, ClassNames, Detections
from pipeline.drawing import draw_detections, label_lines, place_label


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_a_label_goes_inside_or_below_its_box_when_the_place_above_is_taken():
    taken = [place_label((100, 100, 200, 200), (80, 20), (640, 480), [])]
    assert taken[0] == (100, 80, 180, 100)  # above its box
    second = place_label((110, 105, 210, 220), (80, 20), (640, 480), taken)
    assert not _overlap(second, taken[0]) and second[1] == 105  # inside the top of its box
    taken.append(second)
    third = place_label((105, 102, 190, 150), (80, 20), (640, 480), taken)
    assert all(not _overlap(third, t) for t in taken) and third[1] == 150  # below its box


def test_labels_stay_inside_the_picture():
    assert place_label((600, 0, 640, 40), (80, 20), (640, 480), []) == (560, 0, 640, 20)


def test_each_classifier_gets_its_own_line():
    det = Detections(np.array([[10, 10, 50, 50]], np.float32), np.array([0.9], np.float32), np.array([1]),
                     names=ClassNames(["person", "car"]), track_id=np.array([7]))
    det.attributes["type"] = Attribute(np.array([0]), np.array([0.8], np.float32), ClassNames(["minivan"]))
    det.attributes["colour"] = Attribute(np.array([1]), np.array([0.6], np.float32), ClassNames(["red", "blue"]))
    assert label_lines(det, 0) == ["#7 car 0.90", "type: minivan 0.80", "colour: blue 0.60"]
    img = np.zeros((120, 120, 3), np.uint8)
    draw_detections(img, det)
    assert img[:10].any()  # the three-line label block sits above the box, from the top of the picture
