"""The detections of one frame's regions (`detect.regions`), each already in frame pixels,
merged into one set.

Where regions overlap, an object seen whole in two of them is one box: class-aware NMS
by IoU. An object cut by a region's border is seen as a part in that region and whole in
another: the part is dropped when the whole box of its class holds most of it
(containment), which IoU alone misses (a half box has an IoU of 0.5 with the whole).
A box is cut when it touches its region's border where the region does not end at the
frame's edge.
"""
from __future__ import annotations

import numpy as np

from pipeline.decoders.nms import nms
from pipeline.frames import Detections

CONTAINED = 0.7  # a cut box this much inside a box of its class from another region is that object's part
EDGE = 2.0  # pixels: a box this close to a region's inner border is cut by it


def _cut(xyxy: np.ndarray, region: np.ndarray, frame: tuple[int, int]) -> np.ndarray:
    """Per box: it touches a border of `region` that is not the frame's edge."""
    w, h = frame
    x1, y1, x2, y2 = region
    return (((xyxy[:, 0] <= x1 + EDGE) & (x1 > 0)) | ((xyxy[:, 1] <= y1 + EDGE) & (y1 > 0))
            | ((xyxy[:, 2] >= x2 - EDGE) & (x2 < w)) | ((xyxy[:, 3] >= y2 - EDGE) & (y2 < h)))


def merge_regions(parts: list[Detections], regions: np.ndarray, frame: tuple[int, int],
                  iou_threshold: float) -> Detections:
    """One frame's detections from those of its regions (boxes in frame pixels)."""
    names = parts[0].names
    xyxy = np.concatenate([p.xyxy for p in parts]).astype(np.float32)
    score = np.concatenate([p.score for p in parts]).astype(np.float32)
    class_id = np.concatenate([p.class_id for p in parts]).astype(np.int64)
    origin = np.concatenate([np.full((len(p),), i) for i, p in enumerate(parts)])
    cut = np.concatenate([_cut(p.xyxy, regions[i], frame) for i, p in enumerate(parts)])
    keep = nms(xyxy, score, iou_threshold, class_id)
    whole = [int(k) for k in keep if not cut[k]]
    kept = []
    for k in keep:
        k = int(k)
        if cut[k] and _inside_another(k, xyxy, class_id, origin, whole):
            continue
        kept.append(k)
    kept.sort()
    idx = np.asarray(kept, np.int64)
    return Detections(xyxy[idx], score[idx], class_id[idx], names)


def _inside_another(k: int, xyxy: np.ndarray, class_id: np.ndarray, origin: np.ndarray, whole: list[int]) -> bool:
    """Whether box `k` lies mostly inside a whole box of its class found in another region."""
    others = [j for j in whole if j != k and class_id[j] == class_id[k] and origin[j] != origin[k]]
    if not others:
        return False
    b, o = xyxy[k], xyxy[others]
    ix = np.clip(np.minimum(b[2], o[:, 2]) - np.maximum(b[0], o[:, 0]), 0, None)
    iy = np.clip(np.minimum(b[3], o[:, 3]) - np.maximum(b[1], o[:, 1]), 0, None)
    area = max(float((b[2] - b[0]) * (b[3] - b[1])), 1e-6)
    return bool(((ix * iy) / area >= CONTAINED).any())
