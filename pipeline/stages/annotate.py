"""Draw detections on the frame: a box per object in its class colour, and a label
(`#track class score | secondary label score`) on a filled background so it reads on any
picture. Line width and font scale follow the frame size."""
from __future__ import annotations

import colorsys
from typing import Iterable

import cv2
import numpy as np

from pipeline.frames import Frame, Item
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import RunControl, Stage


def class_color(class_id: int) -> tuple[int, int, int]:
    """A stable, well-separated BGR colour per class (golden-ratio hue steps)."""
    h = (class_id * 0.618033988749895) % 1.0
    r, g, b = colorsys.hsv_to_rgb(h, 0.85, 0.95)
    return int(b * 255), int(g * 255), int(r * 255)


def text_color(bg: tuple[int, int, int]) -> tuple[int, int, int]:
    luma = 0.114 * bg[0] + 0.587 * bg[1] + 0.299 * bg[2]
    return (0, 0, 0) if luma > 140 else (255, 255, 255)


class Labels:
    """Names for the detector's and the classifier's class ids."""

    def __init__(self, primary: list[str], secondary: list[str] | None = None):
        self.primary = primary
        self.secondary = secondary or []

    def name(self, class_id: int) -> str:
        return self.primary[class_id] if 0 <= class_id < len(self.primary) else str(class_id)

    def sub_name(self, class_id: int) -> str:
        return self.secondary[class_id] if 0 <= class_id < len(self.secondary) else str(class_id)


def draw_detections(image: np.ndarray, frame: Frame, labels: Labels) -> None:
    det = frame.detections
    if det is None or len(det) == 0:
        return
    h, w = image.shape[:2]
    thickness = max(1, round(h / 360))
    font_scale = max(0.4, h / 1200)
    for i in range(len(det)):
        x1, y1, x2, y2 = (int(round(v)) for v in det.xyxy[i])
        cid = int(det.class_id[i])
        color = class_color(cid)
        cv2.rectangle(image, (x1, y1), (x2, y2), color, thickness, cv2.LINE_AA)
        text = f"{labels.name(cid)} {det.score[i]:.2f}"
        if det.track_id is not None and det.track_id[i] >= 0:
            text = f"#{int(det.track_id[i])} {text}"
        if det.sub_class_id is not None and det.sub_class_id[i] >= 0:
            assert det.sub_score is not None
            text += f" | {labels.sub_name(int(det.sub_class_id[i]))} {det.sub_score[i]:.2f}"
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, font_scale, 1)
        ty = y1 - 2 if y1 - th - base - 2 >= 0 else y1 + th + base + 2
        tx = max(0, min(x1, w - tw - 2))  # keep the label inside the picture
        cv2.rectangle(image, (tx, ty - th - base), (tx + tw + 2, ty + 1), color, -1)
        cv2.putText(image, text, (tx + 1, ty - base + 1), cv2.FONT_HERSHEY_SIMPLEX, font_scale,
                    text_color(color), 1, cv2.LINE_AA)


class AnnotateStage(Stage):
    def __init__(self, name: str, labels: Labels, metrics: Metrics, control: RunControl, queue_size: int,
                 overlays: list | None = None):
        super().__init__(name, metrics, control, queue_size)
        self.labels = labels
        self.overlays = overlays or []

    def process(self, frame: Frame) -> Iterable[Item]:
        for overlay in self.overlays:
            overlay(frame.image, frame)
        draw_detections(frame.image, frame, self.labels)
        return (frame,)
