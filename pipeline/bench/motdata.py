"""MOTChallenge ground truth and a seeded model of a noisy detector on top of it.

The tracker is judged on real people's paths (MOTChallenge `gt.txt`: frame, id, left,
top, width, height, consider-flag, ...) turned into the detections a real detector gives:
boxes missed (one by one, or in runs while a person is hidden), jittered, false positives,
and, at the hard level, weak scores on people partly hidden behind someone nearer the
camera. Three families of that noise (`FAMILIES`), because a tracker's rules are tuned
where they differ and a real detector has them all: *persistent* gives true people scores
around N(0.8, 0.1) and false positives that haunt a place or ride on a person for a few
frames; *sporadic* spreads true scores from 0.4 to 0.95 (small, far, blurred people) and
gives false positives that do not repeat and misses mostly of single frames; *occlusion*
hides a share of the people for up to a second (behind a pillar, a van, a crowd) and
scores their first boxes after it weak (still partly hidden), the case where a tracker
keeps an identity or gives a new one. The same seed gives the same detections, so every
tracker sees the same noise.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.decoders.nms import area, intersections

# the public ground truth py-motmetrics ships: TUD-Campus (71 frames) and TUD-Stadtmitte (179 frames)
BUNDLED = ("TUD-Campus", "TUD-Stadtmitte")


@dataclass
class Sequence:
    """Ground truth of one sequence: per frame (1..N, none skipped) the ids and xyxy boxes."""

    name: str
    ids: list[np.ndarray]
    boxes: list[np.ndarray]
    size: tuple[float, float]  # width, height: the boxes' extent (gt.txt does not say the picture's)


@dataclass(frozen=True)
class Noise:
    """One level of detector noise."""

    name: str
    drop: float                    # share of true boxes missing
    run: tuple[int, int] | None    # missed in runs of this many frames (hidden), else one by one
    jitter: float                  # box noise, standard deviation as a share of the box's size
    false_positives: float         # mean false boxes per frame
    weak_hidden: bool = False      # a partly hidden person's score falls with the hidden share
    single: float = 0.0            # with `run`: share of the misses that are single frames
    scores: tuple[float, float] | None = None  # true scores uniform in this range (None: N(0.8, 0.1))
    ghost_life: tuple[int, int] = (1, 8)       # frames a false positive haunts its place
    ghost_shows: float = 0.5                   # chance it is there on each of them
    occluded: float = 0.0                      # share of the people hidden once, for `occlusion` frames ...
    occlusion: tuple[int, int] = (5, 25)
    weak_after: tuple[int, int] = (1, 3)       # ... their first boxes after it weak: this many, ...
    weakened: tuple[float, float] = (0.15, 0.45)  # ... their scores times this (mostly under a high threshold)


_BROAD = (0.4, 0.95)
FAMILIES = {
    "persistent": {
        "clean": Noise("clean", 0.0, None, 0.0, 0.0),
        "typical": Noise("typical", 0.15, None, 0.03, 1.0),
        "hard": Noise("hard", 0.35, (5, 10), 0.06, 3.0, weak_hidden=True),
    },
    "sporadic": {
        "clean": Noise("clean", 0.0, None, 0.0, 0.0, scores=_BROAD),
        "typical": Noise("typical", 0.15, None, 0.03, 1.0, scores=_BROAD, ghost_life=(1, 1), ghost_shows=1.0),
        "hard": Noise("hard", 0.35, (5, 10), 0.06, 3.0, weak_hidden=True, single=0.7, scores=_BROAD,
                      ghost_life=(1, 1), ghost_shows=1.0),
    },
    "occlusion": {
        "clean": Noise("clean", 0.0, None, 0.0, 0.0, occluded=0.5),
        "typical": Noise("typical", 0.1, None, 0.03, 1.0, occluded=0.5),
        "hard": Noise("hard", 0.2, None, 0.06, 3.0, weak_hidden=True, occluded=0.5),
    },
}
LEVELS = tuple(FAMILIES["persistent"])  # every family has the same levels
ON_PERSON = 0.5        # share of false positives on a person (a part of them, or a second box)


@dataclass
class Detections:
    """A noisy detector's output for one frame; `truth` is the ground-truth id (-1: false)."""

    boxes: np.ndarray
    scores: np.ndarray
    truth: np.ndarray


def bundled_ground_truth() -> list[Path]:
    """py-motmetrics' own copies of the TUD sequences (nothing is downloaded)."""
    spec = importlib.util.find_spec("motmetrics")
    if spec is None or spec.origin is None:
        raise RuntimeError("the bundled ground truth comes with py-motmetrics: pip install 'pipeline[trackbench]'")
    data = Path(spec.origin).parent / "data"
    return [data / name / "gt.txt" for name in BUNDLED]


def read_mot(path: str | Path, name: str | None = None) -> Sequence:
    """A MOTChallenge gt.txt; rows whose consider-flag (7th column) is 0 are left out."""
    path = Path(path)
    try:
        rows = np.loadtxt(path, delimiter=",", ndmin=2)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not MOTChallenge ground truth ({e})") from None
    if rows.shape[1] < 6 or not len(rows):
        raise ValueError(f"{path}: expected rows of frame, id, left, top, width, height")
    if rows.shape[1] >= 7:
        rows = rows[rows[:, 6] != 0]
    frames = rows[:, 0].astype(np.int64)
    boxes = np.column_stack([rows[:, 2], rows[:, 3], rows[:, 2] + rows[:, 4], rows[:, 3] + rows[:, 5]])
    ids, per_frame = [], []
    for f in range(1, int(frames.max()) + 1):
        sel = frames == f
        ids.append(rows[sel, 1].astype(np.int64))
        per_frame.append(boxes[sel])
    size = (float(boxes[:, 2].max()), float(boxes[:, 3].max()))
    return Sequence(name or path.parent.name, ids, per_frame, size)


def hidden_share(boxes: np.ndarray) -> np.ndarray:
    """How much of each box the boxes nearer the camera (lower bottom edge) cover, 0..1."""
    if len(boxes) < 2:
        return np.zeros(len(boxes))
    nearer = boxes[None, :, 3] > boxes[:, None, 3]
    covered = (intersections(boxes, boxes) * nearer).sum(axis=1)
    return np.clip(covered / np.maximum(area(boxes), 1e-9), 0.0, 1.0)


def _missed(seq: Sequence, noise: Noise, rng: np.random.Generator) -> list[np.ndarray]:
    """Per frame, which true boxes the detector misses; runs follow each person's own
    frames, single misses fall on the frames outside them independently."""
    if noise.run is None:
        return [rng.random(len(i)) < noise.drop for i in seq.ids]
    lo, hi = noise.run
    in_runs = noise.drop * (1 - noise.single)
    start = in_runs / ((1 - in_runs) * (lo + hi) / 2)  # a run starts this often while seen
    single = noise.drop * noise.single / (1 - in_runs)
    left: dict[int, int] = {}
    out = []
    for ids in seq.ids:
        miss = np.zeros(len(ids), bool)
        for k, i in enumerate(ids.tolist()):
            if left.get(i, 0) == 0 and rng.random() < start:
                left[i] = int(rng.integers(lo, hi + 1))
            if left.get(i, 0) > 0:
                miss[k] = True
                left[i] -= 1
            elif single and rng.random() < single:
                miss[k] = True
        out.append(miss)
    return out


def _occlusions(seq: Sequence, noise: Noise, rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per frame, which true boxes are hidden and which are weak: a share of the people
    hidden once, on a run of their own frames, seen before it and after it (their first
    boxes after it weak); a person seen too briefly for a run is never hidden."""
    frames: dict[int, list[int]] = {}
    for f, ids in enumerate(seq.ids):
        for i in ids.tolist():
            frames.setdefault(i, []).append(f)
    hidden = [np.zeros(len(i), bool) for i in seq.ids]
    weak = [np.zeros(len(i), bool) for i in seq.ids]
    for who, seen in frames.items():
        gap = int(rng.integers(*noise.occlusion, endpoint=True))
        after = int(rng.integers(*noise.weak_after, endpoint=True))
        if rng.random() >= noise.occluded or len(seen) < gap + after + 2:
            continue
        start = int(rng.integers(1, len(seen) - gap - after))
        for k, f in enumerate(seen[start:start + gap + after]):
            (hidden if k < gap else weak)[f][seq.ids[f] == who] = True
    return hidden, weak


def _jitter(boxes: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    if sigma == 0 or not len(boxes):
        return boxes.copy()
    wh = boxes[:, 2:] - boxes[:, :2]
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2 + rng.normal(0, sigma, wh.shape) * wh
    wh = wh * np.clip(1 + rng.normal(0, sigma, wh.shape), 0.5, 1.5)
    return np.column_stack([centre - wh / 2, centre + wh / 2])


def _ghosts(seq: Sequence, noise: Noise, rng: np.random.Generator) -> list[list[tuple[np.ndarray, float]]]:
    """False boxes per frame: each ghost haunts one place for a few frames, showing on some."""
    frames: list[list[tuple[np.ndarray, float]]] = [[] for _ in seq.ids]
    births = noise.false_positives / (noise.ghost_shows * sum(noise.ghost_life) / 2)
    sizes = np.concatenate([b[:, 2:] - b[:, :2] for b in seq.boxes if len(b)])
    for f in range(len(seq.ids)):
        for _ in range(rng.poisson(births)):
            _haunt(seq, f, noise, rng, sizes, frames)
    return frames


def _haunt(seq: Sequence, f: int, noise: Noise, rng: np.random.Generator, sizes: np.ndarray,
           frames: list[list[tuple[np.ndarray, float]]]) -> None:
    """One ghost born on frame `f`: on the background (a person's size, anywhere), or on
    a person, following them (a part of them, or a second box)."""
    life = int(rng.integers(noise.ghost_life[0], noise.ghost_life[1] + 1))
    score = float(rng.uniform(0.1, 0.8))
    if rng.random() < ON_PERSON and len(seq.ids[f]):
        k = int(rng.integers(len(seq.ids[f])))
        who, size = seq.ids[f][k], seq.boxes[f][k, 2:] - seq.boxes[f][k, :2]
        wh, offset = size * rng.uniform(0.4, 0.9, 2), rng.uniform(-0.5, 0.5, 2) * size

        def centre(g: int) -> np.ndarray | None:
            rows = np.nonzero(seq.ids[g] == who)[0]
            return (seq.boxes[g][rows[0], :2] + seq.boxes[g][rows[0], 2:]) / 2 + offset if len(rows) else None
    else:
        wh = sizes[rng.integers(len(sizes))] * rng.uniform(0.6, 1.2)
        fixed = rng.uniform(wh / 2, np.maximum(np.array(seq.size) - wh / 2, wh / 2))

        def centre(g: int) -> np.ndarray | None:
            return fixed
    for g in range(f, min(f + life, len(seq.ids))):
        if rng.random() >= noise.ghost_shows:
            continue
        c = centre(g)
        if c is None:
            return
        frames[g].append((np.concatenate([c - wh / 2, c + wh / 2]), score))


def noisy(seq: Sequence, noise: Noise, seed: int) -> list[Detections]:
    """The detections a detector with this noise gives on the sequence, reproducibly."""
    rng = np.random.default_rng(seed)
    missed = _missed(seq, noise, rng)
    ghosts = _ghosts(seq, noise, rng)
    hidden, weak = _occlusions(seq, noise, rng) if noise.occluded else (None, None)
    out = []
    for f, (ids, boxes) in enumerate(zip(seq.ids, seq.boxes)):
        scores = (np.clip(rng.normal(0.8, 0.1, len(ids)), 0.3, 0.99) if noise.scores is None
                  else rng.uniform(*noise.scores, len(ids)))
        if noise.weak_hidden:
            scores = np.maximum(0.05, scores * (1 - hidden_share(boxes)))
        keep = ~missed[f]
        if hidden is not None and weak is not None:
            keep &= ~hidden[f]
            scores = np.where(weak[f], scores * rng.uniform(*noise.weakened, len(ids)), scores)
        fb = np.array([g[0] for g in ghosts[f]]).reshape(-1, 4)
        fs = np.array([g[1] for g in ghosts[f]])
        out.append(Detections(
            np.concatenate([_jitter(boxes[keep], noise.jitter, rng), _jitter(fb, noise.jitter, rng)]),
            np.concatenate([scores[keep], fs]),
            np.concatenate([ids[keep], np.full(len(fb), -1, np.int64)])))
    return out
