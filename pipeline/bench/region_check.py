"""Regions (`detect.regions`) against the whole frame, on a 1080p clip where the action is
small and far: the same gated graph run both ways, and on the frames the detector ran on
regions:

- the objects reported (detected in the regions, plus the tracks kept outside them)
  never fewer than the whole-frame run's on the same frame;
- small objects (under `SMALL` pixels high) the regions found and the whole-frame run
  missed, each checked against a reference made by running the detector on tiles of the
  frame at full resolution (overlapping squares of the model's input): a find the tiles
  confirm is real.

The clip (`distant_clip`) is the sample clip shrunk into a corner of a still 1080p
picture with sensor noise: people 25-40 pixels high, the rest of the frame still.

    python scripts/region_check.py --config configs/tracking.yaml
"""
from __future__ import annotations

import os
from dataclasses import replace

import av
import cv2
import numpy as np

from pipeline.bench.gating import gated, run
from pipeline.config import Config
from pipeline.decoders.layouts import DetectionDecoder
from pipeline.decoders.merge import merge_regions
from pipeline.decoders.nms import iou_matrix
from pipeline.engines.session import create_session
from pipeline.frames import DetectPlan, Detections
from pipeline.preprocess import Preprocessor

SMALL = 32  # pixels high: a small object
SAME = 0.5  # IoU of two boxes of one object
SIZE = (1920, 1080)


def distant_clip(sample: str, path: str, frames: int = 150, inset: tuple[int, int, float] = (1380, 700, 0.45),
                 noise: float = 2.0, fps: int = 10) -> str:
    """`sample`'s pictures shrunk by `inset[2]` into a still 1080p picture (its first
    picture, full size) at (`inset[0]`, `inset[1]`), with sensor noise."""
    x, y, scale = inset
    rng = np.random.default_rng(0)
    with av.open(sample) as c, av.open(path, "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = *SIZE, "yuv420p"
        stream.options = {"preset": "veryfast", "crf": "23"}
        background = None
        for i, vf in enumerate(c.decode(video=0)):
            if i >= frames:
                break
            image = vf.to_ndarray(format="bgr24")
            if background is None:
                background = cv2.resize(image, SIZE, interpolation=cv2.INTER_CUBIC)
            canvas = background.copy()
            small = cv2.resize(image, (round(image.shape[1] * scale), round(image.shape[0] * scale)),
                               interpolation=cv2.INTER_AREA)
            canvas[y:y + small.shape[0], x:x + small.shape[1]] = small
            grain = np.rint(rng.normal(0, noise, canvas.shape[:2])).astype(np.int16)[:, :, None]
            canvas = np.clip(canvas + grain, 0, 255).astype(np.uint8)
            picture = av.VideoFrame.from_ndarray(canvas, format="bgr24").reformat(format="yuv420p")
            picture.pts = i
            out.mux(stream.encode(picture))
        out.mux(stream.encode(None))
    return path


class Tiles:
    """The detector on overlapping squares of the model's input covering a frame at full
    resolution, merged as regions are: what is there to find, small objects included."""

    def __init__(self, config: Config):
        model = config.detector
        self.session = create_session(model, 1)
        self.name = self.session.get_inputs()[0].name
        self.pre, self.decoder, self.nms_iou = Preprocessor(model), DetectionDecoder(model), model.nms_iou
        self.side = max(model.input_size)

    def squares(self, w: int, h: int) -> np.ndarray:
        step = self.side * 3 // 4
        xs = sorted({min(x, w - self.side) for x in range(0, w, step)})
        ys = sorted({min(y, h - self.side) for y in range(0, h, step)})
        return np.array([[x, y, x + self.side, y + self.side] for y in ys for x in xs], np.float32)

    def __call__(self, image: np.ndarray) -> Detections:
        squares = self.squares(image.shape[1], image.shape[0])
        parts = []
        for x1, y1, x2, y2 in squares.astype(int):
            tensor, box = self.pre(image[y1:y2, x1:x2])
            out = self.session.run(None, {self.name: tensor.numpy()[None]})
            det = self.decoder.decode(out, 1)[0]
            box.offset_x, box.offset_y = float(x1), float(y1)
            det.xyxy = box.to_frame(det.xyxy)
            parts.append(det)
        return merge_regions(parts, squares, (image.shape[1], image.shape[0]), self.nms_iou)


def _matched(box: list, cls: str, others: list[tuple[str, list]]) -> bool:
    same = [b for c, b in others if c == cls]
    return bool(same) and iou_matrix(np.array([box], np.float32), np.array(same, np.float32)).max() >= SAME


def _small(row: dict) -> list[tuple[str, list]]:
    return [(d["class"], d["box"]) for d in row["detections"] if not d["predicted"] and d["box"][3] - d["box"][1] < SMALL]


def check(config: Config, clip: str, fps: float = 5.0) -> dict:
    """The regions run against the whole-frame run of the gated config on `clip`: on the
    frames both ran on (the first with regions), the frames where the regions reported
    fewer objects, and the small objects of the tiles' reference inside the regions that
    each run found (boxes of the same class, IoU at least 0.5); and the small objects the
    regions found that the reference does not have."""
    one = replace(config, sources=[replace(config.sources[0], uri=os.path.abspath(clip))])
    whole = {r["seq"]: r for r in run(gated(one, fps)).rows}
    cut = {r["seq"]: r for r in run(gated(one, fps, regions=True)).rows}
    seqs = sorted(s for s, r in cut.items() if r.get("regions") and whole.get(s, {}).get("detected"))
    tiles = Tiles(one)
    out = {"frames": len(seqs), "frames_with_fewer": sum(len(cut[s]["detections"]) < len(whole[s]["detections"])
                                                         for s in seqs),
           "small_in_regions": 0, "found_by_regions": 0, "found_by_whole_frame": 0, "regions_not_in_reference": 0}
    with av.open(clip) as c:
        for i, vf in enumerate(c.decode(video=0)):
            if i in seqs:
                _tally(out, tiles(vf.to_ndarray(format="bgr24")), cut[i], whole[i])
    out["detector_runs"] = {"whole": sum(r["detected"] for r in whole.values()),
                            "regions": sum(r["detected"] for r in cut.values())}
    return out


def _tally(out: dict, reference: Detections, cut: dict, whole: dict) -> None:
    plan = DetectPlan(True, "motion", regions=np.array(cut["regions"], np.float32))
    ref = [(reference.names(int(k)), b.tolist()) for k, b in zip(reference.class_id, reference.xyxy)
           if b[3] - b[1] < SMALL]
    looked = plan.covers(np.array([b for _, b in ref], np.float32).reshape(-1, 4))
    inside = [r for r, yes in zip(ref, looked) if yes]
    out["small_in_regions"] += len(inside)
    out["found_by_regions"] += int(sum(_matched(b, c, _small(cut)) for c, b in inside))
    out["found_by_whole_frame"] += int(sum(_matched(b, c, _small(whole)) for c, b in inside))
    out["regions_not_in_reference"] += int(sum(not _matched(b, c, ref) for c, b in _small(cut)))

