"""A decoded picture in BGR at the size a consumer needs (the detector's input, a scaled
annotated video), made without converting the full-size picture first.

The decoder's YUV 4:2:0 planes are scaled the way OpenCV scales a BGR picture, and only
the small result is converted, by the same conversion (`to_ndarray`, honouring the
picture's colour space and range) as a full-size frame: scaling and colour conversion are
both linear, so the pixels agree with "convert, then scale" within rounding, at about
half the cost at 1080p (`scripts/picture_costs.py`). Other pixel formats (hardware
decoders' NV12, 4:2:2) take that longer way.
"""
from __future__ import annotations

import av
import cv2
import numpy as np

PLANAR_420 = ("yuv420p", "yuvj420p")


def _plane(plane) -> np.ndarray:
    """A plane of a VideoFrame as a writable array without its row padding."""
    return np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)[:, :plane.width]


def scaled_bgr(picture: av.VideoFrame, width: int, height: int, interpolation: int = cv2.INTER_LINEAR) -> np.ndarray:
    """`picture` scaled to `width` x `height`, in BGR."""
    if picture.format.name not in PLANAR_420:
        full = picture.to_ndarray(format="bgr24", threads=1)
        return cv2.resize(full, (width, height), interpolation=interpolation)
    ew, eh = width + (width & 1), height + (height & 1)  # 4:2:0 needs even sizes: odd ones gain an edge pixel
    small = av.VideoFrame(ew, eh, picture.format.name)
    src = [_plane(p) for p in picture.planes]
    dst = [_plane(p) for p in small.planes]
    cv2.resize(src[0], (width, height), dst=dst[0][:height, :width], interpolation=interpolation)
    if width < ew:
        dst[0][:, width] = dst[0][:, width - 1]
    if height < eh:
        dst[0][height, :] = dst[0][height - 1, :]
    for i in (1, 2):
        cv2.resize(src[i], (ew // 2, eh // 2), dst=dst[i], interpolation=interpolation)
    small.colorspace, small.color_range = picture.colorspace, picture.color_range
    return small.to_ndarray(format="bgr24", threads=1)[:height, :width]
