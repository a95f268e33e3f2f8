"""How closely a model variant agrees with the original on the same pictures, and how fast each runs.

Agreement is measured against the original's own answers, not ground truth: a detector's
boxes count as the same when they overlap at IoU >= 0.5 with the same class (F1 over all
pictures, matched greedily by score); a classifier's answers when their top-1 class is
the same. Speed is the model's run alone at batch 1, the two models taking turns round
after round (a machine shared with other work slows both alike), median of the rounds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from pipeline.config import ModelConfig
from pipeline.decoders.layouts import DetectionDecoder, classify
from pipeline.engines.session import output_names
from pipeline.frames import Detections

IOU = 0.5


@dataclass
class Agreement:
    score: float      # detectors: F1; classifiers: top-1 agreement
    matched: int      # boxes (or pictures) that agree
    reference: int    # boxes (or pictures) of the original
    variant: int      # boxes (or pictures) of the variant
    kind: str         # "F1" or "top-1"

    def shows(self) -> str:
        if self.kind == "top-1":
            return f"top-1 agreement {self.score:.4f} ({self.matched} of {self.reference} pictures)"
        return (f"F1 {self.score:.4f} at IoU {IOU} with the same class ({self.matched} boxes matched; original "
                f"{self.reference}, variant {self.variant})")


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` [n, 4] with every box of `b` [m, 4] (x1, y1, x2, y2)."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(axis=2)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def matched_boxes(ref: Detections, got: Detections) -> int:
    """Boxes of `got` that match a box of `ref` (IoU >= 0.5, same class), each used once,
    the variant's best-scored boxes first."""
    if not len(ref) or not len(got):
        return 0
    iou = iou_matrix(got.xyxy, ref.xyxy)
    iou[got.class_id[:, None] != ref.class_id[None, :]] = 0
    taken = np.zeros(len(ref), bool)
    count = 0
    for i in np.argsort(-got.score, kind="stable"):
        candidates = np.where(~taken & (iou[i] >= IOU))[0]
        if len(candidates):
            taken[candidates[np.argmax(iou[i, candidates])]] = True
            count += 1
    return count


def detector_f1(refs: list[Detections], gots: list[Detections]) -> Agreement:
    matched = sum(matched_boxes(r, g) for r, g in zip(refs, gots))
    n_ref, n_got = sum(len(r) for r in refs), sum(len(g) for g in gots)
    score = 1.0 if n_ref + n_got == 0 else 2 * matched / (n_ref + n_got)
    return Agreement(score, matched, n_ref, n_got, "F1")


def top1_agreement(refs: list[int], gots: list[int]) -> Agreement:
    same = sum(int(a == b) for a, b in zip(refs, gots))
    return Agreement(same / max(len(refs), 1), same, len(refs), len(gots), "top-1")


class Runner:
    """One model's answers on model inputs: decoded detections, or top-1 classes."""

    def __init__(self, model: ModelConfig, session: ort.InferenceSession):
        self.model, self.session = model, session
        self.names = output_names(model, session)
        self.input = session.get_inputs()[0].name
        self.decoder = None if model.is_classifier else DetectionDecoder(model)

    def raw(self, tensor: np.ndarray) -> list[np.ndarray]:
        return self.session.run(self.names, {self.input: tensor[None]})

    def answers(self, tensors: list[np.ndarray]) -> list:
        out = []
        for t in tensors:
            outputs = self.raw(t)
            if self.decoder is None:
                out.append(int(classify(outputs[0], self.model.softmax)[0][0]))
            else:
                out.append(self.decoder.decode(outputs, 1)[0])
        return out


def agreement(reference: Runner, variant: Runner, tensors: list[np.ndarray]) -> Agreement:
    refs, gots = reference.answers(tensors), variant.answers(tensors)
    return top1_agreement(refs, gots) if reference.decoder is None else detector_f1(refs, gots)


@dataclass
class Speed:
    wall_ms: float  # per picture, median of the rounds
    cpu_ms: float   # the process's CPU time per picture (all threads): what sharing the machine does not inflate


def ms_per_frame(runners: list[Runner], tensors: list[np.ndarray], rounds: int = 3) -> list[Speed]:
    """Each runner's median time per picture over `rounds`, the runners taking turns within
    every round (after one warm-up picture each)."""
    for r in runners:
        r.raw(tensors[0])
    wall: list[list[float]] = [[] for _ in runners]
    cpu: list[list[float]] = [[] for _ in runners]
    for _ in range(rounds):
        for i, r in enumerate(runners):
            start, start_cpu = time.perf_counter(), time.process_time()
            for t in tensors:
                r.raw(t)
            wall[i].append((time.perf_counter() - start) * 1000 / len(tensors))
            cpu[i].append((time.process_time() - start_cpu) * 1000 / len(tensors))
    return [Speed(float(np.median(w)), float(np.median(c))) for w, c in zip(wall, cpu)]
