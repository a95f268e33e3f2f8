"""Motion per camera, measured in the camera's own thread on the decoded picture's
luminance plane, before (and without) any BGR conversion.

The Y plane is read in place (its padded rows skipped; 10- and 16-bit formats shifted
down to 8 bits after shrinking), shrunk to `frame_height` rows (a bilinear step to twice
that size, then an exact 2:1 area average: each small pixel averages about a 4x4 patch,
which takes out most sensor noise, at a fraction of the cost of an area resize by a
fractional factor), blurred, and compared with a running average of the pictures before
it. With `contrast`, the picture is first brought to the average's median brightness (a
change of exposure cancels out) and the threshold follows the average's contrast (its
4th to 96th percentile: lower in a dark or hazy scene); both are taken from whole
pictures that a passing object barely changes, where stretching each picture by its
own percentiles would shift the whole picture when a large object enters. Pixels off by
more than the threshold are motion,
outside the mask; blobs above `min_area` become boxes in frame pixels. The average
follows slowly (time constant `background_s` of the camera's own time, so the result
does not depend on how often it is asked): slow light changes and objects that stop
fade into it. When most of the picture changes at once (lights switched, day/night),
the average is taken afresh instead. Each box also says whether anything in it changed
against the picture measured before (`Motion.live`): one that did not is a picture that
stopped changing, an object that stopped or the trace of one that left, fading into the
average (what runs the detector is what changes, `sources.detect_gate`).
"""
from __future__ import annotations

import math
from dataclasses import replace

import av
import cv2
import numpy as np

from pipeline.config import MotionConfig
from pipeline.frames import Motion

# Formats whose first plane is the luminance, 8 bits a sample.
_Y8 = {"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "yuv440p", "yuvj440p", "yuv411p",
       "yuv410p", "yuva420p", "nv12", "nv21", "nv16", "nv24", "gray"}
# ... 16 bits a sample (little-endian), and the shift that leaves its top 8 bits
_Y16 = {"yuv420p10le": 2, "yuv422p10le": 2, "yuv444p10le": 2, "gray10le": 2, "yuv420p12le": 4, "yuv422p12le": 4,
        "yuv444p12le": 4, "gray12le": 4, "p010le": 8, "p016le": 8, "p210le": 8, "yuv420p16le": 8, "gray16le": 8}
_KERNEL = np.ones((3, 3), np.uint8)
MAX_GAIN = 4.0


def luma(vf: av.VideoFrame) -> tuple[np.ndarray, int]:
    """The picture's Y plane as an array view (no copy), and the right shift that brings
    its samples to 8 bits. A format without a plain Y plane is converted to grey first."""
    name = vf.format.name
    if name in _Y8:
        dtype, shift = np.dtype(np.uint8), 0
    elif name in _Y16:
        dtype, shift = np.dtype("<u2"), _Y16[name]
    else:
        vf, dtype, shift = vf.reformat(format="gray"), np.dtype(np.uint8), 0
    plane = vf.planes[0]
    stride = plane.line_size // dtype.itemsize
    rows = np.frombuffer(plane, dtype, count=stride * plane.height).reshape(plane.height, stride)
    return rows[:, :plane.width], shift


def shrink(y: np.ndarray, shift: int, size: tuple[int, int]) -> np.ndarray:
    """`y` at `size` (w, h), 8 bits."""
    w, h = size
    if y.shape[0] >= 4 * h:
        y = cv2.resize(y, (2 * w, 2 * h), interpolation=cv2.INTER_LINEAR)
    small = cv2.resize(y, (w, h), interpolation=cv2.INTER_AREA)
    if shift:
        small = (small >> shift).astype(np.uint8)
    return small


def levels(small: np.ndarray) -> tuple[float, float]:
    """A picture's median brightness and the spread between its 4th and 96th percentiles."""
    cdf = np.cumsum(np.bincount(small.ravel(), minlength=256))
    p4, p50, p96 = np.searchsorted(cdf, (0.04 * cdf[-1], 0.5 * cdf[-1], 0.96 * cdf[-1]))
    return float(p50), float(p96 - p4)


class MotionDetector:
    """One camera's motion. Its state is made for the first picture's size and afresh when
    the size changes (a reconnect at another resolution)."""

    def __init__(self, config: MotionConfig):
        self.config = config
        self._frame: tuple[int, int] | None = None  # (w, h) of the pictures the state is for
        self._small: tuple[int, int] = (0, 0)
        self._background: np.ndarray | None = None  # float32 at the small size
        self._previous: np.ndarray | None = None  # the picture measured before, at the small size
        self._keep: np.ndarray | None = None  # 255 where motion counts, 0 under the mask
        self._kept = 1
        self._last_t = 0.0
        self._moving_since: float | None = None  # when the motion going on began

    def _reset(self, w: int, h: int) -> None:
        sh = max(1, min(self.config.frame_height, h))
        self._frame, self._small = (w, h), (max(1, round(w * sh / h)), sh)
        keep = np.full((sh, self._small[0]), 255, np.uint8)
        sx, sy = self._small[0] / w, sh / h
        for polygon in self.config.mask:
            points = np.round(np.asarray(polygon, np.float64) * (sx, sy)).astype(np.int32)
            cv2.fillPoly(keep, [points], 0)
        self._keep, self._kept = keep, max(1, cv2.countNonZero(keep))
        self._background = self._previous = None

    def set_mask(self, mask: list[list[tuple[float, float]]]) -> None:
        """A new mask (a reload): from the next picture on, with a fresh background."""
        self.config = replace(self.config, mask=mask)
        self._frame = None

    @property
    def mask(self) -> np.ndarray | None:
        """Where motion counts (255) at the small size, for the tuning view."""
        return self._keep

    def __call__(self, vf: av.VideoFrame, t: float) -> Motion:
        """The motion in picture `vf`, shown at `t` seconds of the camera's time."""
        y, shift = luma(vf)
        h, w = y.shape
        if self._frame != (w, h):
            self._reset(w, h)
        small = cv2.GaussianBlur(shrink(y, shift, self._small), (3, 3), 0)
        if self._background is None:
            self._background, self._last_t, self._moving_since = small.astype(np.float32), t, None
            self._previous = small
            return Motion.none(recalibrated=True, mask=self.config.mask)
        background = cv2.convertScaleAbs(self._background)
        threshold = float(self.config.threshold)
        if self.config.contrast:
            small, threshold = self._adapt(small, background, threshold)
        diff = cv2.absdiff(small, background)
        _, changed = cv2.threshold(diff, threshold, 255, cv2.THRESH_BINARY)
        changed = cv2.bitwise_and(changed, self._keep)
        share = cv2.countNonZero(changed) / self._kept
        alpha = 1.0 - math.exp(-max(0.0, t - self._last_t) / self.config.background_s)
        self._last_t = t
        if share >= self.config.recalibrate:
            self._background, self._previous, self._moving_since = small.astype(np.float32), small, None
            return Motion.none(share, recalibrated=True, mask=self.config.mask)
        grown = cv2.dilate(changed, _KERNEL, iterations=2) if share else changed
        previous, self._previous = self._previous, small
        rects = self._blobs(changed, grown) if share else []
        boxes = self._boxes(rects)
        self._learn(small, grown, alpha, t, len(boxes) > 0)
        return Motion(boxes, share, mask=self.config.mask, live=self._live(rects, small, previous, threshold))

    def _learn(self, small: np.ndarray, grown: np.ndarray, alpha: float, t: float, moving: bool) -> None:
        """The background follows the picture: everywhere while nothing moves, or once the
        motion has lasted `background_s` (a parked car, a light left on, fade in), else
        only where nothing changed (a passing object leaves no trail behind it)."""
        if not moving:
            self._moving_since = None
        elif self._moving_since is None:
            self._moving_since = t
        assert self._background is not None
        if self._moving_since is None or t - self._moving_since >= self.config.background_s:
            cv2.accumulateWeighted(small, self._background, alpha)
        else:
            cv2.accumulateWeighted(small, self._background, alpha, mask=cv2.bitwise_not(grown))

    @staticmethod
    def _adapt(small: np.ndarray, background: np.ndarray, threshold: float) -> tuple[np.ndarray, float]:
        """The picture brought to the background's median brightness (a change of exposure
        or of daylight cancels out; an object covering less than half the picture barely
        moves the median), and the threshold scaled to the background's contrast (a dark
        or hazy scene's changes are small), by at most 1 / `MAX_GAIN`."""
        median, _ = levels(small)
        base, spread = levels(background)
        if median > 0 and abs(base - median) > 1:
            small = cv2.convertScaleAbs(small, alpha=base / median)
        return small, threshold * min(1.0, max(spread, 256.0 / MAX_GAIN) / 255.0)

    def _least(self) -> float:
        """The fewest changed pixels that count, at the small size (`min_area`)."""
        sw, sh = self._small
        return max(1.0, self.config.min_area * sw * sh)

    def _blobs(self, changed: np.ndarray, grown: np.ndarray) -> list[tuple[int, int, int, int]]:
        """The changed blobs (`grown`: joined by a dilation) with at least `min_area`
        changed pixels in them: (x, y, w, h) at the small size."""
        blobs, _ = cv2.findContours(grown, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        least = self._least()
        return [r for r in map(cv2.boundingRect, blobs)
                if cv2.countNonZero(changed[r[1]:r[1] + r[3], r[0]:r[0] + r[2]]) >= least]

    def _boxes(self, rects: list[tuple[int, int, int, int]]) -> np.ndarray:
        """The blobs' boxes in frame pixels."""
        if not rects:
            return np.zeros((0, 4), np.float32)
        assert self._frame is not None
        sw, sh = self._small
        boxes = np.array([(x, y, x + bw, y + bh) for x, y, bw, bh in rects], np.float32)
        fw, fh = self._frame
        boxes[:, [0, 2]] *= fw / sw
        boxes[:, [1, 3]] *= fh / sh
        return boxes

    def _live(self, rects: list[tuple[int, int, int, int]], small: np.ndarray, previous: np.ndarray | None,
              threshold: float) -> np.ndarray | None:
        """Per blob: at least `min_area` of its pixels changed against the picture measured
        before, by the same threshold (None: no picture before it, every blob counts)."""
        if previous is None or not rects:  # a new size starts afresh (`_reset`)
            return None
        _, fresh = cv2.threshold(cv2.absdiff(small, previous), threshold, 255, cv2.THRESH_BINARY)
        least = self._least()
        return np.array([cv2.countNonZero(fresh[y:y + h, x:x + w]) >= least for x, y, w, h in rects], bool)
