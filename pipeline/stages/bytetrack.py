"""Multi-object tracking per camera, ByteTrack-style, with what its successors found to
matter on a noisy detector.

Why our own: the well-kept implementations (supervision, boxmot) pull in the non-headless
OpenCV or a deep-learning framework; the algorithm itself is small, and the tracks kept
as columns of arrays (one Kalman call for all of them) make it several times faster.

Every frame the camera passes on (with `stride` N, every Nth) moves every track's box on
(`motion`, one filter step a frame); on a frame the detector ran on (an update) it then
associates, each pass an optimal assignment:
1. confirmed tracks (tracked and lost) with the high-score detections, on IoU times the
   detection's score (ByteTrack: a confident box wins over a doubtful one at the same
   overlap), a lost track's times `_LOST_DECAY` per update unseen: the longer it was
   unseen, the less its predicted box is to be trusted, so of two tracks on one box the
   one seen just now wins, and a false positive that fires near a track lost long ago
   does not take it. A lost track's IoU is that of its predicted box grown by
   `_LOST_GATE` of its size per frame unseen (up to its size: about a second at 25 fps)
   with a box as tall as it within `_SIZE`: the motion guessed drifts from where the
   object went, the more the longer it is unseen, and a box much smaller is a part of
   something; not where it was last seen at the picture's edge (it left);
2. the confirmed tracks still unmatched, lost ones too, with the low-score detections,
   on IoU, a lost track's in the gate of pass 1 (objects partly hidden keep their id; a
   person back from behind something, scored low on their first frames, takes their
   track back before a confident box could start a new one);
3. the tracks matched on the previous update and still unmatched with the high-score
   detections left, on IoU with their last box rather than the predicted one (OC-SORT's
   observation-centric recovery: a person who stops or turns is where they were, not
   where their velocity says);
4. tentative tracks with the remaining high-score detections. A tentative track has no
   velocity yet, and where the detector skips frames (`detect.fps`, `motion`) an object
   can move further than its own width between two runs. Both boxes are grown (C-BIoU's
   buffered IoU) to their size times the frames between the two sightings, so the match
   accepts the same speed per frame as on consecutive frames, where it is plain IoU; up
   to 3 frames between runs (`_MAX_REACH`): a wider net confirms more false positives
   than the objects it finds (`pipeline bench --tracking --detect-every 5`).
A lost track found again is corrected along the straight path from its last box to the
new one (OC-SORT's observation-centric re-update), so the velocity it guessed while
unseen does not linger; while lost it keeps its size (no height or aspect velocity).
Unmatched detections from `new_track_threshold` (a box strong enough to be matched is
strong enough to start from) start tentative tracks (candidates), confirmed on a later
match once their detections' scores add up to what they need (on a camera's first frame
at once): two sightings in a row at `confirm_score`, more where false positives fire
(`stages.track_candidates`). A track confirmed where a lost one was (its box on the lost
one's prediction, or its first box on the lost one's last box, grown by `_LOST_REACH` of
its size per update unseen) and as tall as it (`_SIZE`; as it was last seen or first
seen: a box matched while it was partly hidden may have been a part of it) takes the
lost one's id: an object hidden behind another for longer than its motion can be
guessed, which stood still or walked on a step meanwhile, keeps its id once its new
track has proved itself, and a false positive, which does not prove itself, never takes
one. Only where the tracker can tell that the lost one did not leave the picture: not
when it was last seen at the picture's edge, nor when the picture's size is not known. A
lost track is removed after `max_age` updates unseen: detector runs that looked at it,
so frames the detector did not see (`detect.fps`, `motion`) and runs on regions
elsewhere (`held`) age no track.
Detections keep their boxes; matched rows get the track id (-1 while tentative).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from pipeline.config import TrackSpec
from pipeline.decoders.nms import iou_matrix
from pipeline.stages import motion
from pipeline.stages.track_candidates import Candidates
from pipeline.stages.track_table import Tracks, TrackState

_LOST_DECAY = 0.97  # a lost track's similarity with a high-score detection, per update unseen
_EDGE = 0.02        # a box this close to the picture's edge (share of its width or height) touches it
_TENTATIVE_REACH = 0.5  # per frame skipped, each side: a box grown to its size times the frames between sightings
_MAX_REACH = 1.0        # ... at most (3 frames between runs)
_LOST_REACH = 0.1       # per update unseen, each side: a lost track's last box grown for a take-over
_LOST_GATE = 0.03       # per frame unseen, each side: a lost track's predicted box grown to be found again
_SIZE = 1.3             # a lost track is found again only by a box as tall as it within this factor
_NO_ROWS = np.zeros(0, np.int64)
_NO_ROWS.flags.writeable = False


def load_solver() -> None:
    """Import the assignment solver now: scipy.optimize takes 0.7 s to import on an idle
    core, seconds beside running cameras, and imported by a tracker's first frame it held
    the thread that hands every camera's frames on while their lanes overflowed. Only a
    graph that tracks pays it, when it is built."""
    import scipy.optimize  # noqa: F401


def assign(sim: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (row, col), each at or above `threshold`, with the most similarity above
    it in all (ByteTrack's objective: two weak pairs never outweigh one good one). Optimal,
    not greedy: one bad early pair cannot push two objects onto each other's tracks."""
    if sim.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    from scipy.optimize import linear_sum_assignment  # loaded by `load_solver` where a graph tracks

    ok = sim >= threshold
    rows, cols = linear_sum_assignment(np.where(ok, threshold - sim, 0.0))
    good = ok[rows, cols]
    return rows[good], cols[good]


def reupdate(seen: np.ndarray, seen_mean: np.ndarray, seen_cov: np.ndarray, obs: np.ndarray,
             steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OC-SORT's re-update of tracks found again (rows): each from its filter at its last box
    `seen`, one virtual box a frame along the straight path to its new box `obs` over its
    `steps` frames; all the tracks still on their path take each step together."""
    mean, cov = seen_mean.copy(), seen_cov.copy()
    for k in range(1, int(steps.max()) + 1):
        on = np.nonzero(steps >= k)[0]
        m, c = motion.predict(mean[on], cov[on])
        path = seen[on] + (obs[on] - seen[on]) * (k / steps[on])[:, None]
        mean[on], cov[on] = motion.update(m, c, path)
    return mean, cov


def buffered_iou(a: np.ndarray, b: np.ndarray, grow: np.ndarray) -> np.ndarray:
    """IoU of every box in `a` with every box in `b`, both grown on each side by `grow`
    (per row of `a`) of their own width and height."""
    def grown(boxes: np.ndarray) -> np.ndarray:
        size = boxes[..., 2:] - boxes[..., :2]
        return boxes + np.concatenate([-size, size], axis=-1) * k

    k = np.asarray(grow, np.float64)[:, None, None]
    a = grown(a.astype(np.float64)[:, None, :])  # [n, 1, 4]
    b = grown(b.astype(np.float64)[None, :, :])  # [n, m, 4]: b grown as each row of `a` asks
    wh = np.maximum(np.minimum(a[..., 2:], b[..., 2:]) - np.maximum(a[..., :2], b[..., :2]), 0.0)
    inter = wh[..., 0] * wh[..., 1]
    union = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1]) + (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1]) - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def _without(rows: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """`rows` less those at the positions `taken`: np.delete's result without its checks,
    which cost more than the work on a few rows."""
    keep = np.ones(len(rows), bool)
    keep[taken] = False
    return rows[keep]


def _of_class(sim: np.ndarray, same: np.ndarray | None, rows: np.ndarray | None = None,
              cols: np.ndarray | None = None) -> np.ndarray:
    """`sim` where its pair is of one class (`same`, of all tracks and detections; of
    `rows` and `cols` where given), else 0; all of it where classes do not matter (None)."""
    if same is None:
        return sim
    return np.where(same if rows is None else same[rows][:, cols], sim, 0.0)


def gated(iou: np.ndarray, pred: np.ndarray, boxes: np.ndarray, t: Tracks, rows: np.ndarray, frame: int,
          same: np.ndarray | None, size: tuple[float, float] | None) -> np.ndarray:
    """`iou` with the lost tracks among `rows` on their predicted boxes grown by
    `_LOST_GATE` of their size per frame unseen up to `_MAX_REACH` (the motion guessed
    drifts from where the object went, the more the longer it is unseen), and only with
    boxes about as tall (`of_size`); not those last seen at the picture's edge (`size`),
    which most likely left it."""
    lost = rows[t.missed[rows] > 0]
    lost = lost[~at_edge(t.seen[lost], size)]
    if not len(lost) or not len(boxes):
        return iou
    out = iou.copy()
    reach = np.minimum(_LOST_GATE * (frame - t.seen_at[lost]), _MAX_REACH)
    sim = np.where(of_size(pred[lost], boxes), buffered_iou(pred[lost], boxes, reach), 0.0)
    out[lost] = _of_class(sim, None if same is None else same[lost])
    return out


def of_size(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per pair of boxes of `a` and `b`: whether their heights are within `_SIZE` of each
    other (an object found again after up to a second is about as tall as it was; a box
    much smaller is a part of something, a false positive on it)."""
    ratio = (a[:, 3] - a[:, 1])[:, None] / np.maximum(b[:, 3] - b[:, 1], 1e-9)[None, :]
    return (ratio <= _SIZE) & (ratio >= 1 / _SIZE)


def at_edge(boxes: np.ndarray, size: tuple[float, float] | None) -> np.ndarray:
    """Per box: whether it touches the picture's edge (a track last seen there has left);
    every box may, where the picture's size is not known."""
    if size is None:
        return np.ones(len(boxes), bool)
    w, h = size
    return ((boxes[:, 0] <= _EDGE * w) | (boxes[:, 1] <= _EDGE * h)
            | (boxes[:, 2] >= (1 - _EDGE) * w) | (boxes[:, 3] >= (1 - _EDGE) * h))


def take_over(t: Tracks, new: np.ndarray, matched: np.ndarray, updates: int, size: tuple[float, float] | None,
              spec: TrackSpec) -> np.ndarray:
    """The lost tracks (rows) whose ids the just confirmed tracks `new` take, now, on update
    `updates`: one born after the lost one was last seen, of its class and size, on its
    predicted box now or with its first box on the lost one's last box (both grown by how
    far it may have gone unseen); the lost one not last seen at the edge of the picture
    (`size`)."""
    if not len(new):
        return _NO_ROWS
    lost = np.nonzero((t.state == TrackState.LOST) & ~matched)[0]
    if not len(lost):
        return _NO_ROWS
    reach = np.minimum(_LOST_REACH * t.missed[lost], _MAX_REACH)  # as far as it may have gone unseen
    sim = np.maximum(iou_matrix(t.seen[new], motion.to_xyxy(t.mean[lost])),
                     buffered_iou(t.seen[lost], t.first[new], reach).T)
    last_seen = updates - 1 - t.missed[lost]
    ok = (t.born[new][:, None] > last_seen[None, :]) & ~at_edge(t.seen[lost], size)[None, :]
    ok &= of_size(t.seen[new], t.seen[lost]) | of_size(t.seen[new], t.first[lost])  # its last box may be a part of it
    if spec.class_aware:
        ok &= t.class_id[new][:, None] == t.class_id[lost][None, :]
    r, c = assign(np.where(ok, sim, 0.0), spec.match_iou)
    t.id[new[r]] = t.id[lost[c]]
    return lost[c]


@dataclass
class ByteTracker:
    """The tracker state of one camera (its parameters: `TrackSpec`; `size`: the picture's
    width and height, where known)."""

    spec: TrackSpec
    size: tuple[float, float] | None = None
    tracks: Tracks = field(default_factory=Tracks)
    frames: int = 0   # frames seen: the filter's steps
    updates: int = 0  # frames the detector ran on: the unit of `missed` and `max_age`
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    candidates: Candidates = field(init=False)

    def __post_init__(self) -> None:
        self.candidates = Candidates(self.spec)

    def update(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
               held: np.ndarray | None = None) -> np.ndarray:
        """Track ids for each detection row (-1: tentative or unmatched), on a frame the
        detector ran on; `held`, per track: the run did not look at it (its regions were
        elsewhere), so it is neither matched nor aged."""
        self.frames += 1
        self.updates += 1
        self._predict()
        active = np.ones(len(self.tracks), bool) if held is None else ~held
        boxes = boxes.astype(np.float64)
        rows, dets = self._associate(boxes, scores, classes, active)
        tentative = self.tracks.state[rows] == TrackState.TENTATIVE
        self._correct(rows, boxes[dets], scores[dets])
        matched = np.zeros(len(self.tracks), bool)
        matched[rows] = True
        confirmed = rows[tentative & (self.tracks.state[rows] == TrackState.TRACKED)]
        taken = take_over(self.tracks, confirmed, matched, self.updates, self.size, self.spec)
        ids = np.full(len(boxes), -1, np.int64)
        ids[dets] = np.where(self.tracks.state[rows] == TrackState.TENTATIVE, -1, self.tracks.id[rows])
        self._age(~matched & active, taken)
        free = np.ones(len(boxes), bool)
        free[dets] = False
        self._start(boxes, scores, classes, free, ids)
        return ids

    def predict(self) -> None:
        """A frame the detector did not see: every track moves on, none is aged."""
        self.frames += 1
        self._predict()

    def hold_still(self, rows: np.ndarray) -> None:
        """The tracks of `rows` (a mask over the tracks) stand still: their boxes stay where
        they are (no guessed motion)."""
        self.tracks.mean[rows, 4:] = 0.0

    def _predict(self) -> None:
        t = self.tracks
        if len(t):
            t.mean, t.cov = motion.predict(t.mean, t.cov)

    def _associate(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
                   active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The matched (track row, detection row) pairs of the four passes, of the `active`
        tracks; one IoU matrix of every track's predicted box with every detection serves
        the passes on predicted boxes."""
        s, t = self.spec, self.tracks
        if not len(t) or not len(boxes):
            return _NO_ROWS, _NO_ROWS
        same = t.class_id[:, None] == classes[None, :] if s.class_aware else None  # pairs of one class
        pred = motion.to_xyxy(t.mean)
        iou = _of_class(iou_matrix(pred, boxes), same)
        strong = scores >= s.high_threshold
        high, low = np.nonzero(strong)[0], np.nonzero(~strong)[0]
        confirmed = np.nonzero((t.state != TrackState.TENTATIVE) & active)[0]
        near = gated(iou, pred, boxes, t, confirmed, self.frames, same, self.size)
        trust = (_LOST_DECAY ** t.missed[confirmed])[:, None]  # a lost track's prediction, less sure each update
        r, first = assign(near[confirmed][:, high] * scores[high] * trust, s.match_iou)
        rows, dets = [confirmed[r]], [high[first]]
        rest = _without(confirmed, r)
        r, c = assign(near[rest][:, low], s.low_match_iou)
        rows.append(rest[r])
        dets.append(low[c])
        rest = _without(rest, r)
        rest = rest[t.missed[rest] == 0]
        left = _without(high, first)
        if len(rest) and len(left):  # on their last box
            sim = _of_class(iou_matrix(t.seen[rest], boxes[left]), same, rest, left)
            r, c = assign(sim * scores[left], s.match_iou)
            rows.append(rest[r])
            dets.append(left[c])
            left = _without(left, c)
        tentative = np.nonzero((t.state == TrackState.TENTATIVE) & active)[0]
        if len(tentative) and len(left):
            reach = np.minimum(_TENTATIVE_REACH * (self.frames - t.seen_at[tentative] - 1), _MAX_REACH)  # frames skipped
            sim = (_of_class(buffered_iou(pred[tentative], boxes[left], reach), same, tentative, left) if reach.any()
                   else iou[tentative][:, left])
            r, c = assign(sim * scores[left], s.confirm_iou)
            rows.append(tentative[r])
            dets.append(left[c])
        return np.concatenate(rows), np.concatenate(dets)

    def _correct(self, rows: np.ndarray, obs: np.ndarray, obs_scores: np.ndarray) -> None:
        """Kalman-correct the matched tracks (those found after a gap along the path) and
        confirm the tentative ones whose scores add up."""
        t = self.tracks
        if not len(rows):
            return
        mean, cov = motion.update(t.mean[rows], t.cov[rows], obs)
        back = np.nonzero(t.missed[rows] > 0)[0]
        if len(back):
            r = rows[back]
            mean[back], cov[back] = reupdate(t.seen[r], t.seen_mean[r], t.seen_cov[r], obs[back], self.frames - t.seen_at[r])
        t.mean[rows], t.cov[rows] = mean, cov
        t.seen[rows], t.seen_mean[rows], t.seen_cov[rows], t.seen_at[rows] = obs, mean, cov, self.frames
        t.missed[rows] = 0
        t.score[rows] += obs_scores
        t.last_score[rows] = obs_scores
        waiting = (t.state[rows] == TrackState.TENTATIVE) & (t.score[rows] < t.need[rows])
        t.state[rows] = np.where(waiting, TrackState.TENTATIVE, TrackState.TRACKED)

    def _age(self, unmatched: np.ndarray, taken: np.ndarray) -> None:
        """An update without a match: tracked tracks become lost, keeping their size (a
        guessed growth or shrinking would run away unseen), tentative ones as their rules say
        (`Candidates.missed`), lost ones past `max_age` or `taken` over removed."""
        t = self.tracks
        t.missed[unmatched] += 1
        newly_lost = unmatched & (t.state == TrackState.TRACKED)
        t.state[newly_lost] = TrackState.LOST
        t.mean[newly_lost, 6:] = 0.0
        failed = self.candidates.missed(t, unmatched, self.updates)
        gone = failed | (unmatched & (t.missed > self.spec.max_age))
        gone[taken] = True
        if gone.any():
            t.keep(~gone)

    def _start(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, free: np.ndarray,
               ids: np.ndarray) -> None:
        new = np.nonzero(free & (scores >= self.spec.new_track_threshold))[0]
        if not len(new):
            return
        # on a camera's first update every object is there already: tracked at once
        first = self.updates == 1
        new_ids = np.array([next(self._ids) for _ in new], np.int64)
        starts = boxes[new].astype(np.float64)
        need = self.candidates.need(self.tracks, starts, classes[new], self.updates)
        self.tracks.add(new_ids, classes[new].astype(np.int64), TrackState.TRACKED if first else TrackState.TENTATIVE,
                        starts, scores[new].astype(np.float64), need, self.updates, self.frames)
        if first:
            ids[new] = new_ids
