"""Which detections a classifier looks at, and the picture it gets of each: one policy
for the classify stage, the benchmark's baseline and its cost limit alike."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.config import ClassifySpec
from pipeline.frames import ClassNames, Detections


@dataclass
class CropPolicy:
    class_ids: np.ndarray | None  # detector classes to classify; None: all
    min_size: float               # smaller boxes (either side, pixels) are skipped
    margin: float                 # grow each box by this fraction on every side

    @classmethod
    def from_spec(cls, spec: ClassifySpec, detector: ClassNames) -> "CropPolicy":
        """From a classify stage's spec (its classes were checked against the detector's)."""
        ids = None if spec.classes is None else detector.ids(spec.classes)
        return cls(ids, spec.min_size, spec.margin)

    def rows(self, det: Detections | None) -> np.ndarray:
        """Indices of the detections to classify."""
        if det is None or len(det) == 0:
            return np.zeros((0,), np.int64)
        wh = det.xyxy[:, 2:] - det.xyxy[:, :2]
        keep = np.minimum(wh[:, 0], wh[:, 1]) >= self.min_size
        if self.class_ids is not None:
            keep &= np.isin(det.class_id, self.class_ids)
        return np.nonzero(keep)[0]

    def crop(self, image: np.ndarray, box: np.ndarray) -> np.ndarray:
        x1, y1, x2, y2 = box
        if self.margin:
            mx, my = (x2 - x1) * self.margin, (y2 - y1) * self.margin
            x1, y1, x2, y2 = x1 - mx, y1 - my, x2 + mx, y2 + my
        h, w = image.shape[:2]
        xa, ya = int(max(0, np.floor(x1))), int(max(0, np.floor(y1)))
        xb, yb = int(min(w, np.ceil(x2))), int(min(h, np.ceil(y2)))
        if xb <= xa or yb <= ya:
            raise ValueError(f"empty crop for box {box.tolist()}")
        return image[ya:yb, xa:xb]
