"""The data that flows between stages: frames, their detections, and end-of-stream markers.

Detections are struct-of-arrays (one numpy array per field) so that decoding, NMS,
mapping back to frame pixels and tracking stay vectorised; a frame carries exactly one
`Detections` for its whole life and stages fill in columns: track ids, and one
`Attribute` per classifier stage (keyed by the stage's name), so any number of
classifiers can label the same objects. Class ids travel with their `ClassNames`, so
every consumer (drawing, JSON lines, analytics) names them the same way.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np


class ClassNames:
    """Names of a model's class ids."""

    __slots__ = ("names",)

    def __init__(self, names: list[str] | None = None):
        self.names = list(names or [])

    def __call__(self, class_id: int) -> str:
        return self.names[class_id] if 0 <= class_id < len(self.names) else str(class_id)

    def __len__(self) -> int:
        return len(self.names)

    def ids(self, names: list[str]) -> np.ndarray:
        return np.array([self.names.index(n) for n in names], np.int64)


@dataclass
class Attribute:
    """One classifier's verdict per detection row: class id (-1: not classified) and score."""

    class_id: np.ndarray
    score: np.ndarray
    names: ClassNames

    @classmethod
    def unset(cls, rows: int, names: ClassNames) -> "Attribute":
        return cls(np.full((rows,), -1, np.int64), np.zeros((rows,), np.float32), names)


@dataclass
class Detections:
    """Boxes in frame pixels (x1, y1, x2, y2) with their scores and class ids."""

    xyxy: np.ndarray
    score: np.ndarray
    class_id: np.ndarray
    names: ClassNames = field(default_factory=ClassNames)
    track_id: np.ndarray | None = None
    attributes: dict[str, Attribute] = field(default_factory=dict)
    predicted: np.ndarray | None = None  # per row: the tracker's box, not the detector's (None: all detected)
    stationary: np.ndarray | None = None  # per row: its track has not moved for `track.stationary_s` (None: none)
    origin: np.ndarray | None = None  # per row: its track's first detected box, x1 y1 x2 y2 (NaN: no track; None: unknown)

    @classmethod
    def empty(cls, names: ClassNames | None = None) -> "Detections":
        return cls(xyxy=np.zeros((0, 4), np.float32), score=np.zeros((0,), np.float32),
                   class_id=np.zeros((0,), np.int64), names=names or ClassNames())

    def __len__(self) -> int:
        return int(self.xyxy.shape[0])

    def extended(self, other: "Detections") -> "Detections":
        """These rows, then `other`'s (say, the boxes a tracker kept beside a run's own);
        a per-row column only one of them has is filled in for the other's rows (no track,
        detected, not stationary, no origin). Classifier attributes come later: neither has any."""
        assert not self.attributes and not other.attributes

        def column(a: np.ndarray | None, b: np.ndarray | None, fill: object) -> np.ndarray | None:
            if a is None and b is None:
                return None
            row = (a if a is not None else b).shape[1:]  # type: ignore[union-attr]
            a = np.full((len(self), *row), fill) if a is None else a
            return np.concatenate([a, np.full((len(other), *row), fill) if b is None else b])
        return Detections(np.concatenate([self.xyxy, other.xyxy]).astype(np.float32),
                          np.concatenate([self.score, other.score]).astype(np.float32),
                          np.concatenate([self.class_id, other.class_id]).astype(np.int64), self.names,
                          column(self.track_id, other.track_id, -1), {},
                          column(self.predicted, other.predicted, False), column(self.stationary, other.stationary, False),
                          column(self.origin, other.origin, np.nan))

    def attribute(self, stage: str, names: ClassNames) -> Attribute:
        """The attribute column a classifier stage fills, created unset on first use."""
        attr = self.attributes.get(stage)
        if attr is None:
            attr = self.attributes[stage] = Attribute.unset(len(self), names)
        return attr


@dataclass
class Letterbox:
    """How a picture (a frame, or a region of it) was fitted into the model input, to map
    boxes back to frame pixels.

    input = (frame - (offset_x, offset_y)) * (scale_x, scale_y) + (pad_x, pad_y)

    `frame_w` x `frame_h` is the fitted picture's size; a region of the frame sits at
    (`offset_x`, `offset_y`) in it.
    """

    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float
    frame_w: int
    frame_h: int
    offset_x: float = 0.0
    offset_y: float = 0.0

    def to_frame(self, xyxy: np.ndarray) -> np.ndarray:
        out = np.empty_like(xyxy, dtype=np.float32)
        out[:, [0, 2]] = (xyxy[:, [0, 2]] - self.pad_x) / self.scale_x
        out[:, [1, 3]] = (xyxy[:, [1, 3]] - self.pad_y) / self.scale_y
        out[:, [0, 2]] = np.clip(out[:, [0, 2]], 0, self.frame_w) + self.offset_x  # (fancy indexing copies)
        out[:, [1, 3]] = np.clip(out[:, [1, 3]], 0, self.frame_h) + self.offset_y
        return out

    def to_input(self, xyxy: np.ndarray) -> np.ndarray:
        out = np.empty_like(xyxy, dtype=np.float32)
        out[:, [0, 2]] = (xyxy[:, [0, 2]] - self.offset_x) * self.scale_x + self.pad_x
        out[:, [1, 3]] = (xyxy[:, [1, 3]] - self.offset_y) * self.scale_y + self.pad_y
        return out


@dataclass
class Motion:
    """What changed in a frame against its camera's background (`sources.motion_detector`):
    the boxes around the changes, in frame pixels, which of them changed since the picture
    measured before (`live`), and the share of the unmasked picture that changed.
    `recalibrated`: so much changed at once (lights, day/night) that the background was
    taken afresh and no motion is reported."""

    boxes: np.ndarray  # (n, 4) float32 x1, y1, x2, y2
    changed: float = 0.0
    recalibrated: bool = False
    mask: list = field(default_factory=list)  # the camera's polygons where motion is ignored (the tuning view)
    # per box: something in it changed since the picture measured before (None: every box);
    # a box that did not is what stopped or what left, still fading into the background
    live: np.ndarray | None = None

    @property
    def live_boxes(self) -> np.ndarray:
        return self.boxes if self.live is None else self.boxes[self.live]

    @classmethod
    def none(cls, changed: float = 0.0, recalibrated: bool = False, mask: list | None = None) -> "Motion":
        return cls(np.zeros((0, 4), np.float32), changed, recalibrated, mask or [])

    @property
    def moving(self) -> bool:
        return len(self.boxes) > 0


@dataclass
class DetectPlan:
    """Whether the detector runs on a frame, and why: decided in the camera's thread
    (`sources.detect_gate`) from the frame's time and its own motion, so a file gives the
    same runs on a fast machine and a loaded one. `reason` of a run: `every` (no gate),
    `first`, `motion`, `tracks`, `refresh`, `border` (between the rate's frames, a moving
    track at a line or a zone's edge); of none: `rate` (between the detection rate's frames),
    `still` (no motion and no refresh due: gated)."""

    run: bool
    reason: str
    motion: Motion | None = None
    regions: np.ndarray | None = None  # (k, 4) squares the detector runs on (None: the whole frame)

    def covers(self, boxes: np.ndarray, share: float = 0.5) -> np.ndarray:
        """Per box (frame pixels): whether the detector's run on this frame looked at it
        (at least `share` of it inside one region; everything, on the whole frame)."""
        if not self.run:
            return np.zeros((len(boxes),), bool)
        regions = self.regions
        if regions is None:
            return np.ones((len(boxes),), bool)
        if not len(boxes):
            return np.zeros((0,), bool)
        ix = np.clip(np.minimum(boxes[:, None, 2], regions[None, :, 2])
                     - np.maximum(boxes[:, None, 0], regions[None, :, 0]), 0, None)
        iy = np.clip(np.minimum(boxes[:, None, 3], regions[None, :, 3])
                     - np.maximum(boxes[:, None, 1], regions[None, :, 1]), 0, None)
        area = np.maximum((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), 1e-6)
        return ((ix * iy) / area[:, None] >= share).any(axis=1)


@dataclass
class LineCount:
    """A counting line as it stands after this frame, for drawing."""

    name: str
    a: tuple[float, float]
    b: tuple[float, float]
    into: int
    out: int


@dataclass
class ZoneCount:
    """A zone as it stands after this frame, for drawing."""

    name: str
    polygon: np.ndarray
    inside: int
    stationary: int = 0  # of those inside, the ones that have not moved for `track.stationary_s`
    classes: dict[str, int] = field(default_factory=dict)  # of those inside, how many of each class


@dataclass
class Event:
    """Something analytics saw on a frame: a track crossed a line (`direction` in or out)
    or entered or left a zone. The sink adds when it was written (`time`, wall clock) and
    its evidence (paths relative to `outputs.dir`) before the frame's JSON line; the same
    record goes to the JSON lines, the page's panel and the event destinations; with a
    recording, where in it the frame lies (what the page's player opens)."""

    camera: str
    seq: int
    pts: int | None
    track: int
    cls: str
    event: str  # "cross", "enter", "exit"; "stationary", "moving": an object inside a zone stops, goes on
    line: str | None = None
    zone: str | None = None
    direction: str | None = None
    time: float | None = None
    snapshot: str | None = None
    crop: str | None = None
    snapshot_error: str | None = None  # why a picture named above could not be written (it is left out)
    clip: str | None = None
    clip_pre_s: float | None = None  # the clip's pre-roll, where the byte budget made it shorter than `pre_s`
    clip_note: str | None = None
    recording: str | None = None  # the camera's recording file that holds the event's frame
    recording_time: float | None = None  # the frame's time in that file (seconds, its own clock)

    def to_dict(self) -> dict:
        """Its JSON form: `class` for `cls`, unset fields left out."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        out["class"] = out.pop("cls")
        return out

    @property
    def name(self) -> str:
        """A short name for files: `cross_door_in_t7`."""
        parts = [self.event, self.line or self.zone or "", self.direction or "", f"t{self.track}"]
        return "_".join(p for p in parts if p).replace("/", "-")


def seconds(ticks: int, time_base: Fraction) -> float:
    """`ticks` of `time_base` in seconds: the value float(ticks * time_base) gives, without
    the Fraction it makes (a few per frame of every camera)."""
    return ticks * time_base.numerator / time_base.denominator


@dataclass
class View:
    """The picture a frame is shown in (its annotated video, the live view): the frame's
    own picture (`scale` 1) or a copy scaled down by `scale`, on which its results are
    drawn; `video`: the annotated video takes it (its rate may skip frames the live
    view shows)."""

    image: np.ndarray = field(repr=False)
    scale: float
    video: bool


@dataclass
class Frame:
    """One decoded picture of one camera on its way through the graph.

    `seq` counts decoded frames per camera (gaps mean drops); `order` is assigned when the
    frame enters the first batching stage and is gap-free per camera, which is what the
    reorder buffers after asynchronous stages wait on.

    `image` is the BGR picture, made from the decoded `picture` (an `av.VideoFrame`) the
    first time a stage asks for it: a frame nobody draws on, crops or shows is never
    converted (`converted` says whether it was). `view` is the picture it is shown in,
    where it is shown (`sinks.views`).
    """

    camera: str
    seq: int
    pts: int | None
    time_base: Fraction | None
    image: np.ndarray | None = field(repr=False)
    t_capture: float
    rate: Fraction | None = None
    order: int = -1
    tensor: object | None = None  # the model input (`ModelInput`) until the detector has run
    letterbox: Letterbox | None = None
    region_inputs: list[tuple[object, Letterbox]] | None = None  # the detector's inputs where it runs on regions
    detections: Detections | None = None
    lines: list[LineCount] = field(default_factory=list)  # analytics results on this frame
    zones: list[ZoneCount] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stamps: dict[str, float] = field(default_factory=dict)
    picture: Any = field(default=None, repr=False)  # the decoded av.VideoFrame, until converted
    record_time: float | None = None  # its time on the camera's recording's timeline (None: not recorded)
    live_time: float | None = None  # its picture's media time on the camera's live stream (None: not streamed)
    view: View | None = None
    plan: DetectPlan | None = None  # whether the detector runs on it (None: it does)
    detected: bool = False  # the detector ran on it: its detections are its own, not predicted

    @property
    def runs_detector(self) -> bool:
        return self.plan is None or self.plan.run

    def stamp(self, boundary: str) -> None:
        self.stamps[boundary] = time.perf_counter()

    @property
    def pts_seconds(self) -> float | None:
        if self.pts is None or self.time_base is None:
            return None
        return seconds(self.pts, self.time_base)


def _image(frame: Frame) -> np.ndarray:
    if frame._image is None:
        if frame.picture is None:
            raise ValueError(f"frame {frame.camera}/{frame.seq} has no picture")
        frame._image = frame.picture.to_ndarray(format="bgr24", threads=1)  # swscale would start a pool per camera
        frame.picture = None
    return frame._image


def _set_image(frame: Frame, image: np.ndarray | None) -> None:
    frame._image = image


def _size(frame: Frame) -> tuple[int, int]:
    """The picture's width and height, without converting it."""
    if frame._image is not None:
        h, w = frame._image.shape[:2]
        return w, h
    return frame.picture.width, frame.picture.height


Frame.image = property(_image, _set_image)  # type: ignore[assignment]  # a field made on first use
Frame.converted = property(lambda f: f._image is not None)  # type: ignore[attr-defined]
Frame.size = property(_size)  # type: ignore[attr-defined]


@dataclass
class EndOfStream:
    """Marks the end of one camera's frames; it flows through the graph behind them.

    `reason` is "eof", "stopped" (signal) or "failed" (source error, in `error`).
    """

    camera: str
    reason: str = "eof"
    error: str | None = None
    order: int = -1


Item = Frame | EndOfStream


@dataclass(frozen=True)
class Resume:
    """Where a camera picks up when it restarts elsewhere (another process or machine) or
    returns under an id that ran before: frames of its file processed elsewhere (skipped),
    the first `seq` it numbers and where its timeline continues (a live camera, a returning
    id), the video segment to write next (`<name>.partN`; with time-named segments the
    number of segments on disk, and the next is named after the newest of them), whether
    its JSON lines continue an existing file, and the lease its writers hold (`epoch`, 0:
    unfenced; see `sinks.lease.Lease`)."""

    start_at: int = 0
    seq: int = 0
    time_s: float = 0.0
    segment: int = 0
    append: bool = False
    epoch: int = 0
