"""How a frame's results are drawn on a picture: a box per object in its class colour with a
label block (`#track class score`, then one line per classifier: `name: label score`),
and the analytics lines and zones with this frame's counts.

Labels go above their box when there is room; where another label already took that
place they go inside the top of the box, then below it, so overlapping objects keep
readable labels. Line width and font scale follow the size of the picture drawn on; a
picture scaled down from the frame (`scale`) gets the frame's coordinates scaled with it.
"""
from __future__ import annotations

import colorsys

import cv2
import numpy as np

from pipeline.frames import Detections, Frame

FONT = cv2.FONT_HERSHEY_SIMPLEX
LINE_COLOR = (0, 220, 255)
ZONE_COLOR = (255, 200, 0)


def class_color(class_id: int) -> tuple[int, int, int]:
    """A stable, well-separated BGR colour per class (golden-ratio hue steps)."""
    h = (class_id * 0.618033988749895) % 1.0
    r, g, b = colorsys.hsv_to_rgb(h, 0.85, 0.95)
    return int(b * 255), int(g * 255), int(r * 255)


def text_color(bg: tuple[int, int, int]) -> tuple[int, int, int]:
    luma = 0.114 * bg[0] + 0.587 * bg[1] + 0.299 * bg[2]
    return (0, 0, 0) if luma > 140 else (255, 255, 255)


def label_lines(det: Detections, i: int) -> list[str]:
    head = f"{det.names(int(det.class_id[i]))} {det.score[i]:.2f}"
    if det.track_id is not None and det.track_id[i] >= 0:
        head = f"#{int(det.track_id[i])} {head}"
    if det.stationary is not None and det.stationary[i]:
        head += " still"
    lines = [head]
    for stage, attr in det.attributes.items():
        if attr.class_id[i] >= 0:
            lines.append(f"{stage}: {attr.names(int(attr.class_id[i]))} {attr.score[i]:.2f}")
    return lines


def _overlaps(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_label(box: tuple[int, int, int, int], size: tuple[int, int], frame: tuple[int, int],
                taken: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
    """Where a label block of `size` goes for `box`: above it, else inside its top, else
    below it; the first place inside the frame that no earlier label covers."""
    x1, y1, x2, y2 = box
    w, h = size
    fw, fh = frame
    x = max(0, min(x1, fw - w))
    for y in (y1 - h, y1, y2):
        rect = (x, y, x + w, y + h)
        if y >= 0 and y + h <= fh and not any(_overlaps(rect, t) for t in taken):
            return rect
    y = min(max(0, y1 - h), max(0, fh - h))
    return (x, y, x + w, y + h)


def draw_detections(image: np.ndarray, det: Detections | None, scale: float = 1.0) -> None:
    if det is None or len(det) == 0:
        return
    boxes = det.xyxy * scale if scale != 1.0 else det.xyxy
    h, w = image.shape[:2]
    thickness = max(1, round(h / 360))
    font = max(0.4, h / 1200)
    (_, line_h), base = cv2.getTextSize("Ag", FONT, font, 1)
    step = line_h + base + 2
    taken: list[tuple[int, int, int, int]] = []
    order = np.argsort(-det.score)  # the most confident objects get the best label places
    for i in order:
        x1, y1, x2, y2 = (int(round(v)) for v in boxes[i])
        color = class_color(int(det.class_id[i]))
        predicted = det.predicted is not None and det.predicted[i]  # the tracker's box: drawn thinner
        cv2.rectangle(image, (x1, y1), (x2, y2), color, max(1, thickness // 2) if predicted else thickness, cv2.LINE_AA)
        lines = label_lines(det, int(i))
        width = max(cv2.getTextSize(t, FONT, font, 1)[0][0] for t in lines) + 4
        rect = place_label((x1, y1, x2, y2), (width, step * len(lines)), (w, h), taken)
        taken.append(rect)
        cv2.rectangle(image, rect[:2], (rect[2] - 1, rect[3] - 1), color, -1)
        for k, text in enumerate(lines):
            cv2.putText(image, text, (rect[0] + 2, rect[1] + k * step + line_h + 1), FONT, font, text_color(color),
                        1, cv2.LINE_AA)


def draw_analytics(image: np.ndarray, frame: Frame, scale: float = 1.0) -> None:
    """This frame's zones (objects inside) and counting lines (in/out so far)."""
    font = max(0.4, image.shape[0] / 1200)
    for zone in frame.zones:
        polygon = zone.polygon * scale
        cv2.polylines(image, [polygon.astype(np.int32)], True, ZONE_COLOR, 2, cv2.LINE_AA)
        x, y = polygon[0, 0]
        still = f", {zone.stationary} stationary" if zone.stationary else ""
        cv2.putText(image, f"{zone.name}: {zone.inside} inside{still}", (int(x) + 4, int(y) + 16), FONT, font,
                    ZONE_COLOR, 1, cv2.LINE_AA)
    for line in frame.lines:
        a, b = tuple(int(v * scale) for v in line.a), tuple(int(v * scale) for v in line.b)
        cv2.line(image, a, b, LINE_COLOR, 2, cv2.LINE_AA)
        cv2.putText(image, f"{line.name}: in {line.into} out {line.out}", (a[0] + 4, max(12, a[1] - 6)), FONT, font,
                    LINE_COLOR, 1, cv2.LINE_AA)


def draw(image: np.ndarray, frame: Frame, scale: float = 1.0) -> None:
    """Draw `frame`'s results on `image`: the frame's picture, or a copy of it scaled by `scale`."""
    draw_analytics(image, frame, scale)
    draw_detections(image, frame.detections, scale)
