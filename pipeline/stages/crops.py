"""Which detections a classifier looks at, and the picture it gets of each: one policy
for the classify stage, the benchmark's baseline and its cost limit alike."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.frames import Detections


@dataclass
class CropPolicy:
    class_ids: np.ndarray | None  # detector classes to classify; None: all
    min_size: float = 24.0        # smaller boxes (either side, pixels) are skipped
    margin: float = 0.0           # grow each box by this fraction on every side

    @classmethod
    def from_options(cls, options: dict, detector_labels: list[str]) -> "CropPolicy":
        """From a classify stage's options (already checked with the config)."""
        names = options.get("classes")
        ids = None if names is None else np.array([detector_labels.index(c) for c in names if c in detector_labels],
                                                  np.int64)
        return cls(ids, float(options.get("min_size", 24)), float(options.get("margin", 0.0)))

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
