"""Fit a picture into a model's input: letterbox/resize, colour order, normalisation, HWC->CHW.

The fitted picture stays uint8 (a quarter of the float size) until the engine writes
it, normalised, straight into its preallocated batch buffer: one float pass per frame
instead of a float copy that is then copied again. The returned `Letterbox` maps
model-input boxes back to frame pixels. Normalisation is `(pixel * scale - mean) / std`,
folded into one multiply-add.
"""
from __future__ import annotations

from typing import Callable

import av
import cv2
import numpy as np

from pipeline.config import ModelConfig
from pipeline.frames import Frame, Letterbox
from pipeline.pictures import scaled_bgr


class ModelInput:
    """One fitted picture, normalised lazily into the model's [3, H, W] float32 layout."""

    __slots__ = ("pixels", "rgb", "mul", "add", "identity")

    def __init__(self, pixels: np.ndarray, rgb: bool, mul: np.ndarray, add: np.ndarray, identity: bool):
        self.pixels, self.rgb, self.mul, self.add, self.identity = pixels, rgb, mul, add, identity

    @property
    def shape(self) -> tuple[int, int, int]:
        h, w = self.pixels.shape[:2]
        return (3, h, w)

    def write(self, dst: np.ndarray) -> None:
        """Fill `dst` ([3, H, W] float32, e.g. one row of a batch buffer)."""
        src = self.pixels[:, :, ::-1] if self.rgb else self.pixels
        np.copyto(dst, src.transpose(2, 0, 1), casting="unsafe")
        if not self.identity:
            dst *= self.mul
            dst += self.add

    def numpy(self) -> np.ndarray:
        out = np.empty(self.shape, np.float32)
        self.write(out)
        return out


class Preprocessor:
    """`from_picture`: a frame's input is made from its decoded picture (see `frame`);
    off where every frame's BGR picture is made anyway, which is then the cheaper start."""

    def __init__(self, model: ModelConfig, from_picture: bool = False):
        self.from_picture = from_picture
        self.width, self.height = model.input_size
        self.mode = model.letterbox
        self.rgb = model.color == "rgb"
        self.pad_value = model.pad_value
        std = np.asarray(model.std, np.float32)
        self._mul = (model.scale / std).reshape(3, 1, 1).astype(np.float32)
        self._add = (-np.asarray(model.mean, np.float32) / std).reshape(3, 1, 1).astype(np.float32)
        self._identity = bool(np.all(self._mul == 1) and np.all(self._add == 0))
        self._canvas = np.empty((self.height, self.width, 3), np.uint8)

    def fit(self, image: np.ndarray) -> Letterbox:
        """Draw `image` into the canvas and return how it was placed."""
        h, w = image.shape[:2]
        return self._fit(w, h, lambda size: cv2.resize(image, size, interpolation=cv2.INTER_LINEAR))

    def fit_picture(self, picture: av.VideoFrame) -> Letterbox:
        """`fit` for a decoded picture, scaled before its colour conversion (`pictures`)."""
        return self._fit(picture.width, picture.height, lambda size: scaled_bgr(picture, *size))

    def _fit(self, w: int, h: int, resize: Callable[[tuple[int, int]], np.ndarray]) -> Letterbox:
        if self.mode == "stretch":
            sx, sy = self.width / w, self.height / h
            self._canvas[:] = resize((self.width, self.height))
            return Letterbox(sx, sy, 0.0, 0.0, w, h)
        if self.mode == "center_crop":
            r = max(self.width / w, self.height / h)
            nw, nh = max(self.width, round(w * r)), max(self.height, round(h * r))
            resized = resize((nw, nh))
            x0, y0 = (nw - self.width) // 2, (nh - self.height) // 2
            self._canvas[:] = resized[y0:y0 + self.height, x0:x0 + self.width]
            return Letterbox(nw / w, nh / h, -x0, -y0, w, h)
        r = min(self.width / w, self.height / h)
        nw, nh = int(w * r), int(h * r)
        if self.mode == "center":
            px, py = (self.width - nw) // 2, (self.height - nh) // 2
        else:
            px, py = 0, 0
        self._canvas[:] = self.pad_value
        self._canvas[py:py + nh, px:px + nw] = resize((nw, nh))
        return Letterbox(r, r, float(px), float(py), w, h)

    def __call__(self, image: np.ndarray) -> tuple[ModelInput, Letterbox]:
        """The model input for a BGR picture, and its mapping back to the picture."""
        return self._input(self.fit(image))

    def frame(self, frame: Frame) -> tuple[ModelInput, Letterbox]:
        """The model input for a frame: from its decoded picture where it has one (not
        converted yet), else from its BGR picture."""
        if not self.from_picture or frame.converted or frame.picture is None:
            return self(frame.image)
        return self._input(self.fit_picture(frame.picture))

    def _input(self, box: Letterbox) -> tuple[ModelInput, Letterbox]:
        return ModelInput(self._canvas.copy(), self.rgb, self._mul, self._add, self._identity), box
