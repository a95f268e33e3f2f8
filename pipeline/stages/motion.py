"""Constant-velocity Kalman filters on boxes, as in SORT/ByteTrack, for many tracks at once.

State per track: centre x, y, aspect (w/h), height and their velocities; the noise scales
with the box's height (ByteTrack's weights), so near and far objects are alike. Rows are
tracks: one call predicts or corrects all of them, which is what keeps the tracker's cost
per frame flat in the number of objects.
"""
from __future__ import annotations

import numpy as np

_POS = 1.0 / 20   # position noise per unit of height
_VEL = 1.0 / 160  # velocity noise per unit of height
_EYE4, _EYE8 = np.eye(4), np.eye(8)
# a filter's noise, standard deviations: height times the scale, plus the floor (the aspect's)
_INIT_SCALE = np.array([2 * _POS, 2 * _POS, 0, 2 * _POS, 10 * _VEL, 10 * _VEL, 0, 10 * _VEL])
_INIT_FLOOR = np.array([0, 0, 1e-2, 0, 0, 0, 1e-5, 0])
_STEP_SCALE = np.array([_POS, _POS, 0, _POS, _VEL, _VEL, 0, _VEL])
_STEP_FLOOR = np.array([0, 0, 1e-2, 0, 0, 0, 1e-5, 0])
_BOX_SCALE = np.array([_POS, _POS, 0, _POS])
_BOX_FLOOR = np.array([0, 0, 1e-1, 0])


def to_xyah(xyxy: np.ndarray) -> np.ndarray:
    w = xyxy[:, 2] - xyxy[:, 0]
    h = np.maximum(xyxy[:, 3] - xyxy[:, 1], 1e-3)
    return np.column_stack([xyxy[:, 0] + w / 2, xyxy[:, 1] + h / 2, w / h, h])


def to_xyxy(mean: np.ndarray) -> np.ndarray:
    cx, cy, a, h = mean[:, 0], mean[:, 1], mean[:, 2], mean[:, 3]
    w = a * h
    return np.column_stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])


def initiate(xyxy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Filters starting at these boxes, at rest, with a wide velocity uncertainty."""
    z = to_xyah(xyxy)
    mean = np.concatenate([z, np.zeros_like(z)], axis=1)
    std = z[:, 3:4] * _INIT_SCALE + _INIT_FLOOR
    return mean, (std ** 2)[:, :, None] * _EYE8


def predict(mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step ahead: position += velocity (F P F^T written out, F = [[I, I], [0, I]])."""
    q = (mean[:, 3:4] * _STEP_SCALE + _STEP_FLOOR) ** 2
    mean = mean.copy()
    mean[:, :4] += mean[:, 4:]
    cov = cov.copy()
    cov[:, :4, :] += cov[:, 4:, :]
    cov[:, :, :4] += cov[:, :, 4:]
    cov += q[:, :, None] * _EYE8
    return mean, cov


def update(mean: np.ndarray, cov: np.ndarray, xyxy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The filters corrected by one observed box each."""
    r = (mean[:, 3:4] * _BOX_SCALE + _BOX_FLOOR) ** 2
    s = cov[:, :4, :4] + r[:, :, None] * _EYE4
    pht = cov[:, :, :4]
    gain = np.linalg.solve(s, pht.transpose(0, 2, 1)).transpose(0, 2, 1)  # P H^T S^-1 (S symmetric)
    innovation = to_xyah(xyxy) - mean[:, :4]
    mean = mean + np.einsum("nij,nj->ni", gain, innovation)
    cov = cov - gain @ pht.transpose(0, 2, 1)
    return mean, cov
