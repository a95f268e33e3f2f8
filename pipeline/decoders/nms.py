"""Greedy non-maximum suppression, class-aware.

Class awareness uses the usual offset trick: boxes of different classes are shifted
apart by more than the image extent so one greedy pass never lets them suppress each
other. Candidate counts after the score threshold are small (tens), so plain numpy is
fast enough and keeps the semantics (IoU without the +1 pixel convention) explicit.
"""
from __future__ import annotations

import numpy as np


def area(a: np.ndarray) -> np.ndarray:
    return (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])


def intersections(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Area of the overlap of every box in `a` with every box in `b` (both [n, 4] xyxy)."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0, None)
    return wh[..., 0] * wh[..., 1]


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in `a` against every box in `b` (both [n, 4] xyxy)."""
    inter = intersections(a, b)
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def nms(xyxy: np.ndarray, scores: np.ndarray, iou_threshold: float, class_ids: np.ndarray | None = None,
        max_keep: int | None = None) -> np.ndarray:
    """Indices of the kept boxes, highest score first."""
    if len(xyxy) == 0:
        return np.zeros((0,), np.int64)
    boxes = xyxy.astype(np.float64)
    if class_ids is not None:
        extent = float(np.abs(boxes).max()) + 1.0
        boxes = boxes + (class_ids.astype(np.float64) * 2 * extent)[:, None]
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size:
        i = int(order[0])
        keep.append(i)
        if max_keep is not None and len(keep) >= max_keep:
            break
        rest = order[1:]
        ious = iou_matrix(boxes[i:i + 1], boxes[rest])[0]
        order = rest[ious <= iou_threshold]
    return np.asarray(keep, np.int64)
