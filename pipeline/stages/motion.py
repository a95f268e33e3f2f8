"""Constant-velocity Kalman filters on boxes, as in SORT/ByteTrack, for many tracks at once.

State per track: centre x, y, aspect (w/h), height and their velocities; the noise scales
with the box's height (ByteTrack's weights), so near and far objects are alike. Rows are
tracks: one call predicts or corrects all of them, which is what keeps the tracker's cost
per frame flat in the number of objects.

The four axes never mix: each moves by its own velocity (F = [[I, I], [0, I]]), is observed
by itself (H = [I, 0]) and has noises of its own (Q and R diagonal), so the 8x8 covariance
of ByteTrack's filter is zero outside each axis's 2x2 block of position and velocity. The
covariance is kept as those blocks, per track and axis the position's variance, the
position-velocity covariance and the velocity's variance ([n, 3, 4]): the same filter,
each step a few elementwise operations instead of 8x8 products and a matrix solve.
"""
from __future__ import annotations

import numpy as np

_POS = 1.0 / 20   # position noise per unit of height
_VEL = 1.0 / 160  # velocity noise per unit of height
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
    half = np.empty((len(mean), 2), mean.dtype)  # half the width (aspect times height) and height
    np.multiply(mean[:, 2], mean[:, 3], out=half[:, 0])
    half[:, 1] = mean[:, 3]
    half /= 2
    return np.concatenate([mean[:, :2] - half, mean[:, :2] + half], axis=1)


def initiate(xyxy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Filters starting at these boxes, at rest, with a wide velocity uncertainty."""
    z = to_xyah(xyxy)
    mean = np.concatenate([z, np.zeros_like(z)], axis=1)
    var = (z[:, 3:4] * _INIT_SCALE + _INIT_FLOOR) ** 2
    return mean, np.stack([var[:, :4], np.zeros_like(z), var[:, 4:]], axis=1)


def predict(mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step ahead: position += velocity (F P F^T + Q, per axis)."""
    q = mean[:, 3:4] * _STEP_SCALE
    q += _STEP_FLOOR
    q *= q
    mean = mean.copy()
    mean[:, :4] += mean[:, 4:]
    pp, pv, vv = cov[:, 0], cov[:, 1], cov[:, 2]
    out = np.empty_like(cov)  # the blocks written in place: a few calls for any number of tracks
    np.add(pv, vv, out=out[:, 1])
    np.add(vv, q[:, 4:], out=out[:, 2])
    np.multiply(pv, 2, out=out[:, 0])
    out[:, 0] += pp
    out[:, 0] += vv
    out[:, 0] += q[:, :4]
    return mean, out


def update(mean: np.ndarray, cov: np.ndarray, xyxy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The filters corrected by one observed box each (per axis: the gain is the position's
    and the velocity's covariance with the observed position over its variance S)."""
    pp, pv, vv = cov[:, 0], cov[:, 1], cov[:, 2]
    s = pp + (mean[:, 3:4] * _BOX_SCALE + _BOX_FLOOR) ** 2
    gain_p, gain_v = pp / s, pv / s
    innovation = to_xyah(xyxy) - mean[:, :4]
    mean = mean + np.concatenate([gain_p * innovation, gain_v * innovation], axis=1)
    return mean, np.stack([pp - gain_p * pp, pv - gain_p * pv, vv - gain_v * pv], axis=1)
