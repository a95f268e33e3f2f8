"""Model output layouts -> detections in model-input pixels.

Each layout follows its public specification:
- `yolox`: raw YOLOX head [b, n, 5+C]; rows are grid cells of strides 8/16/32 in
  row-major order, `[dx, dy, log_w, log_h, obj, cls...]` (obj and cls already sigmoided).
- `yolov5`: [b, n, 5+C] with `cx, cy, w, h` in input pixels, objectness, class scores.
- `yolov8`: Ultralytics YOLOv8/v11 [b, 4+C, n], `cx, cy, w, h` then class scores,
  no objectness.
- `e2e`: exports with NMS inside: [n, 7] rows of `batch, x1, y1, x2, y2, score, class`,
  or [b, n, 6] rows of `x1, y1, x2, y2, score, class` (YOLOv10-style end-to-end heads).
Score threshold, class filter and class-aware NMS are applied here (NMS is skipped for
`e2e`, whose boxes are final).
"""
from __future__ import annotations

import numpy as np

from pipeline.config import ModelConfig
from pipeline.decoders.nms import nms
from pipeline.errors import PipelineError
from pipeline.frames import ClassNames, Detections

YOLOX_STRIDES = (8, 16, 32)


class LayoutError(PipelineError, ValueError):
    """The model's output does not have the shape its configured layout requires."""


def yolox_grid(width: int, height: int, strides: tuple[int, ...] = YOLOX_STRIDES) -> tuple[np.ndarray, np.ndarray]:
    """Per-row grid offsets (x, y) and stride of a YOLOX head for an input size."""
    grids, steps = [], []
    for s in strides:
        gy, gx = np.meshgrid(np.arange(height // s), np.arange(width // s), indexing="ij")
        grids.append(np.stack([gx.ravel(), gy.ravel()], axis=1))
        steps.append(np.full((gx.size, 1), s))
    return np.concatenate(grids).astype(np.float32), np.concatenate(steps).astype(np.float32)


def _cxcywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    out = np.empty_like(b)
    out[:, :2] = b[:, :2] - b[:, 2:4] / 2
    out[:, 2:] = b[:, :2] + b[:, 2:4] / 2
    return out


class DetectionDecoder:
    """Turns one model output batch into one `Detections` per image (input pixels)."""

    def __init__(self, model: ModelConfig):
        self.model = model
        self.layout = model.layout
        self.threshold = model.score_threshold
        self.names = ClassNames(model.labels)
        self.allowed: np.ndarray | None = None
        if model.classes is not None:
            self.allowed = self.names.ids(model.classes)
        self._grid: tuple[np.ndarray, np.ndarray] | None = None
        if self.layout == "yolox":
            self._grid = yolox_grid(*model.input_size)

    def decode(self, outputs: list[np.ndarray], count: int) -> list[Detections]:
        out = outputs[0]
        if self.layout == "e2e":
            return self._decode_e2e(out, count)
        if out.ndim != 3:
            raise LayoutError(f"layout {self.layout} expects a 3-D output, got shape {list(out.shape)}")
        self._check_classes(out)
        results = []
        for b in range(count):
            boxes, scores, classes = self._candidates(out[b], self.threshold)
            results.append(self._finish(boxes, scores, classes, apply_nms=True))
        return results

    def _check_classes(self, out: np.ndarray) -> None:
        """With labels configured, the class count pins the layout: a head read the wrong
        way round fails loudly instead of producing nonsense boxes."""
        n = len(self.model.labels)
        if not n:
            return
        if self.layout == "yolov8" and out.shape[1] != 4 + n:
            raise LayoutError(f"layout yolov8 expects [batch, 4+{n}, anchors] for {n} labels, "
                              f"got {list(out.shape)}")
        if self.layout in ("yolox", "yolov5") and out.shape[2] != 5 + n:
            raise LayoutError(f"layout {self.layout} expects [batch, anchors, 5+{n}] for {n} labels, "
                              f"got {list(out.shape)}")

    def _candidates(self, rows: np.ndarray, threshold: float, top: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Boxes (input pixels), scores and classes of the rows scoring at least `threshold`
        (or of the `top` best rows, whatever their score)."""
        if self.layout == "yolov8":
            rows = rows.T  # [n, 4+C]
            cls = rows[:, 4:]
            obj = None
        else:
            if self.layout == "yolox" and self._grid is not None and rows.shape[0] != len(self._grid[0]):
                raise LayoutError(f"layout yolox at input {self.model.input_size[0]}x{self.model.input_size[1]} "
                                  f"expects {len(self._grid[0])} rows, got {rows.shape[0]}")
            obj = rows[:, 4]
            cls = rows[:, 5:]
        if cls.shape[1] == 0:
            raise LayoutError(f"layout {self.layout}: output has no class columns (shape {list(rows.shape)})")
        if obj is not None and top is None:
            pre = np.nonzero(obj >= threshold)[0]  # score = obj * cls <= obj
            rows, cls, obj = rows[pre], cls[pre], obj[pre]
        else:
            pre = None
        if self.allowed is not None:
            cls_sub = cls[:, self.allowed]
            best = self.allowed[np.argmax(cls_sub, axis=1)] if len(cls_sub) else np.zeros((0,), np.int64)
            best_score = cls_sub.max(axis=1) if len(cls_sub) else np.zeros((0,), np.float32)
        else:
            best = np.argmax(cls, axis=1)
            best_score = cls[np.arange(len(cls)), best]
        scores = best_score * obj if obj is not None else best_score
        keep = np.argsort(-scores)[:top] if top is not None else np.nonzero(scores >= threshold)[0]
        rows, scores, best = rows[keep], scores[keep], best[keep]
        box = rows[:, :4].astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):  # a misread layout overflows: `implausible` says so
            if self.layout == "yolox":
                assert self._grid is not None
                grid, stride = self._grid
                idx = keep if pre is None else pre[keep]
                g, s = grid[idx], stride[idx]
                box = np.concatenate([(box[:, :2] + g) * s, np.exp(box[:, 2:4]) * s], axis=1)
            return _cxcywh_to_xyxy(box), scores.astype(np.float32), best.astype(np.int64)

    def _decode_e2e(self, out: np.ndarray, count: int) -> list[Detections]:
        if out.ndim == 2 and out.shape[1] == 7:
            batch_idx = out[:, 0].astype(np.int64)
            per_image = [out[batch_idx == b, 1:] for b in range(count)]
        elif out.ndim == 3 and out.shape[2] == 6:
            per_image = [out[b] for b in range(count)]
        else:
            raise LayoutError(f"layout e2e expects [n, 7] or [b, n, 6], got shape {list(out.shape)}")
        results = []
        for rows in per_image:
            scores = rows[:, 4].astype(np.float32)
            classes = rows[:, 5].astype(np.int64)
            keep = scores >= self.threshold
            beyond = classes[keep & ((classes < 0) | (classes >= len(self.names)))] if len(self.names) else []
            if len(beyond):
                raise LayoutError(f"class id {int(beyond[0])} is beyond the model's {len(self.names)} labels "
                                  f"(labels of another model?)")
            if self.allowed is not None:
                keep &= np.isin(classes, self.allowed)
            results.append(self._finish(rows[keep, :4].astype(np.float32), scores[keep], classes[keep],
                                        apply_nms=False))
        return results

    def _finish(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, apply_nms: bool) -> Detections:
        if apply_nms:
            keep = nms(boxes, scores, self.model.nms_iou, classes, self.model.max_detections)
        else:
            keep = np.argsort(-scores, kind="stable")[: self.model.max_detections]
        return Detections(xyxy=boxes[keep], score=scores[keep], class_id=classes[keep], names=self.names)

    def implausible(self, outputs: list[np.ndarray], top: int = 50) -> str | None:
        """Why the best-scored boxes of the first picture of `outputs` look like a layout
        read the wrong way (None when they look like boxes): two layouts can share an
        output shape (YOLOX raw head and YOLOv5 are both [b, n, 5+C]), and the wrong one
        gives thousands of nonsense boxes without any error."""
        out = outputs[0]
        if self.layout == "e2e":
            return None  # boxes come from the model, already final
        if out.ndim != 3:
            return None  # `decode` reports the shape
        boxes, _, _ = self._candidates(out[0], 0.0, top)
        if not len(boxes):
            return None
        w, h = self.model.input_size
        with np.errstate(invalid="ignore"):  # a misread layout gives inf - inf
            bw, bh = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
            cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
            bad = (~np.isfinite(boxes).all(axis=1) | (bw < 2) | (bh < 2) | (bw > 4 * w) | (bh > 4 * h)
                   | (cx < -0.5 * w) | (cx > 1.5 * w) | (cy < -0.5 * h) | (cy > 1.5 * h))
        if bad.mean() <= 0.5:
            return None
        others = {"yolox": "yolov5", "yolov5": "yolox"}.get(self.layout)
        hint = f"; is it a {others} model?" if others else ""
        return (f"{int(bad.sum())} of the {len(boxes)} best-scored boxes are degenerate or far outside the {w}x{h} "
                f"input: layout {self.layout} does not fit this model's output{hint}")


def classify(logits: np.ndarray, softmax: bool) -> tuple[np.ndarray, np.ndarray]:
    """Top-1 class id and its probability for each row of [b, C] logits (or probabilities)."""
    if logits.ndim != 2:
        logits = logits.reshape(logits.shape[0], -1)
    if softmax:
        z = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(z)
        probs = e / e.sum(axis=1, keepdims=True)
    else:
        probs = logits
    top = np.argmax(probs, axis=1)
    return top.astype(np.int64), probs[np.arange(len(top)), top].astype(np.float32)
