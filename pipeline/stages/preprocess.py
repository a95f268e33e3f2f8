"""Fit a picture into a model's input: letterbox/resize, colour order, normalisation, HWC->CHW.

The canvas is allocated once per preprocessor (one per camera thread, one per
classifier stage), and the returned `Letterbox` maps model-input boxes back to frame
pixels. Normalisation is `(pixel * scale - mean) / std`, folded into one multiply-add.
"""
from __future__ import annotations

import cv2
import numpy as np

from pipeline.config import ModelConfig
from pipeline.frames import Letterbox


class Preprocessor:
    def __init__(self, model: ModelConfig):
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
        if self.mode == "stretch":
            sx, sy = self.width / w, self.height / h
            cv2.resize(image, (self.width, self.height), dst=self._canvas, interpolation=cv2.INTER_LINEAR)
            return Letterbox(sx, sy, 0.0, 0.0, w, h)
        if self.mode == "center_crop":
            r = max(self.width / w, self.height / h)
            nw, nh = max(self.width, round(w * r)), max(self.height, round(h * r))
            resized = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_LINEAR)
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
        self._canvas[py:py + nh, px:px + nw] = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_LINEAR)
        return Letterbox(r, r, float(px), float(py), w, h)

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, Letterbox]:
        """The model-input tensor [3, H, W] float32 for a BGR picture, and its mapping."""
        box = self.fit(image)
        src = self._canvas[:, :, ::-1] if self.rgb else self._canvas
        tensor = np.ascontiguousarray(src.transpose(2, 0, 1), dtype=np.float32)
        if not self._identity:
            tensor *= self._mul
            tensor += self._add
        return tensor, box
