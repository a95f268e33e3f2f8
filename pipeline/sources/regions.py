"""Where the detector looks on a frame with motion (`detect.regions`): square crops of the
full-resolution frame around what moves, so that a distant person in a 1080p picture is
seen at full resolution instead of at 416/1920 of it.

Each box to cover (motion boxes, and tracked boxes the motion touches, whole) wants a
square `MARGIN` times its larger side, at least the model's input. Squares are merged,
cheapest merge first, while a merge costs no resolution (one square already holds the
other's box) or while there are more squares than a run may take (`budget`); a square
that would not fit in the frame means the whole frame. The budget is the cost rule: k
regions are k items of one batch, so they are used only where a batch of k costs no
more than one run on the whole frame (measured per model at start-up: 1 on a CPU, where
k regions cost k runs; several on a GPU). Regions that would cover most of the frame
are not worth it either: then the whole frame is used.
"""
from __future__ import annotations

import numpy as np

MARGIN = 1.35  # a region is this much larger than what it covers
MOST = 0.8  # regions covering more of the frame than this: the whole frame instead


def _side(box: np.ndarray, least: int) -> float:
    return max(float(least), MARGIN * float(max(box[2] - box[0], box[3] - box[1])))


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])], np.float32)


def _cluster(boxes: list[np.ndarray], least: int, budget: int, limit: float) -> list[np.ndarray] | None:
    """The boxes merged into groups, each to be one square (None: no way within `limit`)."""
    groups = list(boxes)
    while len(groups) > 1:
        best = None
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                u = _union(groups[i], groups[j])
                growth = _side(u, least) - max(_side(groups[i], least), _side(groups[j], least))
                if best is None or growth < best[0]:
                    best = (growth, i, j, u)
        assert best is not None
        growth, i, j, u = best
        if _side(u, least) > limit or (growth > 0 and len(groups) <= budget):
            break
        groups = [g for k, g in enumerate(groups) if k not in (i, j)] + [u]
    if len(groups) > budget or any(_side(g, least) > limit for g in groups):
        return None
    return groups


def square(group: np.ndarray, least: int, frame: tuple[int, int]) -> np.ndarray:
    """The square (x1, y1, x2, y2) around `group`, moved to lie inside the frame; its
    corner and side are even (the picture's colour planes are halved)."""
    w, h = frame
    side = min(int(np.ceil(_side(group, least) / 2)) * 2, w - w % 2, h - h % 2)
    cx, cy = (group[0] + group[2]) / 2, (group[1] + group[3]) / 2
    x = int(np.clip(round((cx - side / 2) / 2) * 2, 0, w - side))
    y = int(np.clip(round((cy - side / 2) / 2) * 2, 0, h - side))
    return np.array([x, y, x + side, y + side], np.float32)


def plan_regions(boxes: np.ndarray, frame: tuple[int, int], least: int, budget: int) -> np.ndarray | None:
    """Square regions (k, 4) covering `boxes` (frame pixels), at least `least` pixels a
    side, at most `budget` of them; None: the whole frame is the better run."""
    w, h = frame
    if not len(boxes) or budget < 1 or least > min(w, h):
        return None
    groups = _cluster([np.asarray(b, np.float32) for b in boxes], least, budget, float(min(w, h)))
    if groups is None:
        return None
    squares = np.stack([square(g, least, frame) for g in groups])
    area = float(((squares[:, 2] - squares[:, 0]) * (squares[:, 3] - squares[:, 1])).sum())
    return None if area > MOST * w * h else squares
