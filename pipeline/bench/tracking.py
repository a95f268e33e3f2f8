"""`pipeline bench --tracking`: the tracker beside peer trackers on the same noisy
detections of MOTChallenge ground truth, scored by py-motmetrics (an outside evaluator).

Per noise family and level (`motdata.FAMILIES`, every family at each level asked: a
detector's persistent false positives, sporadic ones, people hidden and back weak) and
seed, every sequence's detections are made once and given to each tracker in turn; the
metrics (ID switches and IDF1 among them: whether an identity survives) are over all
sequences of a seed, then the mean over seeds; the time is each tracker's own update
calls per frame (median over the runs, trackers taking turns, so a busy machine slows
them alike). Peers run when their package is installed: supervision's ByteTrack,
boxmot's ByteTrack. Each tracker is told the picture's size, as the pipeline's is (here
the ground truth's extent: gt.txt does not say it); this project's uses it to tell an
object that left the picture.

With `--detect-every K`, this project's tracker also runs as behind `detect.fps` or the
motion gate: detections on one frame in K only, its tracks predicted on the others, and
every frame scored (peers have no step without detections).
"""
from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from pipeline.bench.motdata import FAMILIES, LEVELS, Detections, Noise, Sequence, bundled_ground_truth, noisy, read_mot
from pipeline.config import TrackSpec
from pipeline.decoders.nms import iou_matrix
from pipeline.errors import BAD_INPUT

# a tracker for one sequence: detections (xyxy, score) in, the tracked rows (xyxy, id) out;
# None in: a frame the detector did not see (this project's only)
Tracker = Callable[[np.ndarray | None, np.ndarray | None], tuple[np.ndarray, np.ndarray]]
Size = tuple[float, float] | None  # the picture's width and height, where known
Start = Callable[[Size], Tracker]
METRICS = ("mota", "idf1", "num_switches", "num_false_positives", "num_misses")


def ours(spec: TrackSpec | None = None) -> Start:
    from pipeline.stages import motion
    from pipeline.stages.bytetrack import ByteTracker, TrackState

    def start(size: Size) -> Tracker:
        tracker = ByteTracker(spec or TrackSpec(), size)

        def step(boxes: np.ndarray | None, scores: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
            if boxes is None or scores is None:  # as the track stage does: the confirmed tracks, moved on
                tracker.predict()
                t = tracker.tracks
                rows = t.state == TrackState.TRACKED
                return motion.to_xyxy(t.mean[rows]), t.id[rows]
            ids = tracker.update(boxes, scores, np.zeros(len(boxes), np.int64))
            return boxes[ids >= 0], ids[ids >= 0]
        return step
    return start


def _supervision() -> Start:
    import supervision as sv

    def start(size: Size) -> Tracker:
        tracker = sv.ByteTrack()

        def step(boxes: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            d = sv.Detections(xyxy=boxes.astype(np.float32), confidence=scores.astype(np.float32),
                              class_id=np.zeros(len(boxes), int))
            out = tracker.update_with_detections(d)
            return out.xyxy, out.tracker_id
        return step
    return start


def _boxmot() -> Start:
    from boxmot import ByteTrack

    logging.getLogger("boxmot").setLevel(logging.WARNING)  # its settings, logged for every tracker made

    def start(size: Size) -> Tracker:
        tracker = ByteTrack()

        def step(boxes: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            out = tracker.update(np.column_stack([boxes, scores, np.zeros(len(boxes))]).astype(np.float32))
            return out[:, :4], out[:, 4].astype(np.int64)
        return step
    return start


def trackers() -> dict[str, Start]:
    """This project's tracker, then each peer whose package imports here."""
    found = {"this project": ours()}
    for name, make in (("supervision ByteTrack", _supervision), ("boxmot ByteTrack", _boxmot)):
        try:
            found[name] = make()
        except ImportError:
            continue
    return found


def run_tracker(start: Start, dets: list[Detections], size: Size = None, every: int = 1) -> tuple[list, float]:
    """The tracked rows per frame, and the seconds spent in the tracker; with `every` K the
    detections of one frame in K only."""
    step, out, spent = start(size), [], 0.0
    for i, d in enumerate(dets):
        t0 = time.perf_counter()
        boxes, ids = step(d.boxes, d.scores) if i % every == 0 else step(None, None)
        spent += time.perf_counter() - t0
        out.append((np.asarray(boxes, np.float64).reshape(-1, 4), np.asarray(ids, np.int64).reshape(-1)))
    return out, spent


def accumulate(seq: Sequence, tracked: list):
    """py-motmetrics' events of one run: a box is found when IoU >= 0.5. The distances are
    its `iou_matrix`'s (1 - IoU, none past 0.5), computed here: 1.4 calls numpy's removed
    `asfarray`."""
    import motmetrics as mm

    acc = mm.MOTAccumulator(auto_id=True)
    for ids, gt, (boxes, hyp) in zip(seq.ids, seq.boxes, tracked):
        dist = 1.0 - iou_matrix(gt, boxes)
        acc.update(ids, hyp, np.where(dist <= 0.5, dist, np.nan))
    return acc


def overall(accs: list, names: list[str]) -> dict[str, float]:
    import motmetrics as mm

    logging.disable(logging.INFO)  # it logs its own timings on the root logger
    try:
        summary = mm.metrics.create().compute_many(accs, metrics=list(METRICS), names=names, generate_overall=True)
    finally:
        logging.disable(logging.NOTSET)
    return {m: float(summary.loc["OVERALL", m]) for m in METRICS}


@dataclass
class Row:
    family: str
    level: str
    tracker: str
    runs: list[dict[str, float]] = field(default_factory=list)
    us_per_frame: list[float] = field(default_factory=list)

    def mean(self, metric: str) -> float:
        return statistics.fmean(r[metric] for r in self.runs)


def runs(found: dict[str, Start], every: list[int]) -> dict[str, tuple[Start, int]]:
    """Each tracker on every frame's detections, then this project's on one frame in K."""
    out = {name: (start, 1) for name, start in found.items()}
    for k in sorted(set(every) - {1}):
        out[f"this project, detector on 1 frame in {k}"] = (found["this project"], k)
    return out


def bench(sequences: list[Sequence], levels: list[str], seeds: list[int],
          found: dict[str, Start], every: list[int] | None = None,
          families: dict[str, dict[str, Noise]] | None = None) -> list[Row]:
    """The rows of the table: every family (`motdata.FAMILIES` unless given) at each level."""
    rows = []
    frames = sum(len(s.ids) for s in sequences)
    planned = runs(found, every or [1])
    families = families or FAMILIES
    for family, level in ((f, lv) for f in families for lv in levels):
        table = {name: Row(family, level, name) for name in planned}
        for seed in seeds:
            dets = [noisy(s, families[family][level], seed * 1000 + k) for k, s in enumerate(sequences)]
            for name, (start, k) in planned.items():
                accs, spent = [], 0.0
                for s, d in zip(sequences, dets):
                    tracked, seconds = run_tracker(start, d, s.size, k)
                    accs.append(accumulate(s, tracked))
                    spent += seconds
                table[name].runs.append(overall(accs, [s.name for s in sequences]))
                table[name].us_per_frame.append(1e6 * spent / frames)
        rows += table.values()
    return rows


def markdown(rows: list[Row]) -> str:
    lines = ["| noise | level | tracker | MOTA | IDF1 | ID switches | false positives | missed | µs per frame |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.family} | {r.level} | {r.tracker} | {100 * r.mean('mota'):.1f} | {100 * r.mean('idf1'):.1f} "
                     f"| {r.mean('num_switches'):.1f} | {r.mean('num_false_positives'):.1f} "
                     f"| {r.mean('num_misses'):.0f} | {statistics.median(r.us_per_frame):.0f} |")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    try:
        if importlib.util.find_spec("motmetrics") is None:
            raise RuntimeError("the scores come from py-motmetrics: pip install 'pipeline[trackbench]'")
        sequences = [read_mot(p) for p in args.gt or bundled_ground_truth()]
    except (RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return BAD_INPUT
    if any(k < 1 for k in args.detect_every):
        print("error: --detect-every: each K must be 1 or more", file=sys.stderr)
        return BAD_INPUT
    unknown = [lv for lv in args.levels if lv not in LEVELS]
    if unknown:
        print(f"error: --levels: unknown {', '.join(unknown)} (known: {', '.join(LEVELS)})", file=sys.stderr)
        return BAD_INPUT
    found = trackers()
    print(f"{', '.join(s.name for s in sequences)}: {sum(len(s.ids) for s in sequences)} frames; "
          f"seeds 1..{args.seeds}; trackers: {', '.join(found)}")
    print(markdown(bench(sequences, args.levels, list(range(1, args.seeds + 1)), found, args.detect_every)))
    return 0
