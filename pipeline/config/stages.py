"""`graph`: the stages in order, one typed spec per stage type.

A spec holds the stage's options with their defaults and docs, the number of threads
the stage runs on (the thread plan counts them), and the checks that involve the rest
of the config (models, cameras, the stages before it), so every mistake in a graph is
reported in the same round as the rest of the config. The stages themselves are built
from their specs by `pipeline.stages.STAGES`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from pipeline.config.limits import LINES, ZONES, over
from pipeline.config.models import ModelConfig
from pipeline.config.schema import Reader, internal, non_negative, option, positive, read_points, within


@dataclass
class GraphContext:
    """What a stage's checks may look at: the models, the camera ids, the stages before it."""

    models: dict[str, ModelConfig]
    cameras: list[str]
    before: list["StageSpec"] = field(default_factory=list)

    @property
    def detector(self) -> ModelConfig | None:
        entry = entry_stage(self.before)
        return self.models.get(entry.model) if entry is not None else None

    def last(self, kind: type) -> Any:
        return next((s for s in reversed(self.before) if isinstance(s, kind)), None)


@dataclass(kw_only=True)
class StageSpec:
    type: ClassVar[str]
    threads: ClassVar[int] = 0  # threads of its own (0: inline, in the thread of the stage before it)
    about: ClassVar[str] = ""

    name: str | None = option(None, shown="its type", doc="the stage's name in metrics and outputs")
    path: str = internal("")  # YAML path, for problems found while building

    @property
    def stage_name(self) -> str:
        return self.name or self.type

    def check(self, ctx: GraphContext, r: Reader) -> None:
        """Problems that involve the rest of the config."""


def _check_model(r: Reader, ctx: GraphContext, where: str, model: str | None, classifier: bool) -> ModelConfig | None:
    if model is None:
        return None
    m = ctx.models.get(model)
    if m is None:
        r.problem(where, f"unknown model {model!r} (models: {', '.join(ctx.models) or 'none'})")
        return None
    if classifier and not m.is_classifier:
        r.problem(where, f"model {model!r} is not a classifier (layout: classifier)")
    if not classifier and m.is_classifier:
        r.problem(where, f"model {model!r} has layout classifier; detect needs a detector")
    return m


def _detector_classes(r: Reader, ctx: GraphContext, where: str, classes: list[str] | None) -> None:
    det = ctx.detector
    if det is None or not det.labels:
        return
    for i, c in enumerate(classes or []):
        if c not in det.labels:
            r.problem(f"{where}[{i}]", f"unknown detector class {c!r}")


def _needs_tracker(r: Reader, ctx: GraphContext, path: str) -> None:
    if ctx.last(TrackSpec) is None:
        r.problem(path, "needs a track stage before it (it works on track ids)")


FPS_DOC = ("the detector sees at most this many frames per second of each camera's time; on the others the tracker "
           "predicts (`max_fps` and `stride` drop frames from the whole pipeline instead)")
MOTION_DOC = ("run the detector only on frames with motion (measured as `sources[].motion` says), or when a refresh "
              "is due")
REFRESH_DOC = "with `motion`: run the detector at least this often (seconds of the camera's time), motion or not"
REGIONS_DOC = ("with `motion`: run the detector on square crops around the motion, cut from the full-resolution "
               "frame, where they cost no more than one run on the whole frame")
BORDER_DOC = ("with `fps`: every frame goes to the detector while a moving track is this many seconds (at its "
              "speed) from crossing a counting line or a zone's edge of the analytics stage, before or after, and "
              "with `motion` while motion touches one: crossings and entries are decided at the camera's full rate, "
              "as without a rate (0: the rate holds there too)")


@dataclass(frozen=True)
class DetectRate:
    """Which frames of one camera the detector sees: the detect stage's options with the
    camera's own overrides applied (`DetectSpec.rate`)."""

    fps: float | None = None
    motion: bool = False
    refresh_s: float = 10.0
    regions: bool = False
    border_s: float = 0.5

    @property
    def at_borders(self) -> bool:
        """Whether lines and zone edges take every frame: only behind a rate, and unless `border_s` is 0."""
        return self.fps is not None and self.border_s > 0


@dataclass(kw_only=True)
class DetectCameraSpec:
    fps: float | None = option(None, check=positive, shown="the stage's", doc="this camera's `fps`")
    motion: bool | None = option(None, shown="the stage's", doc="this camera's `motion`")
    refresh_s: float | None = option(None, check=positive, shown="the stage's", doc="this camera's `refresh_s`")
    regions: bool | None = option(None, shown="the stage's", doc="this camera's `regions`")
    border_s: float | None = option(None, check=non_negative, shown="the stage's", doc="this camera's `border_s`")


@dataclass(kw_only=True)
class DetectSpec(StageSpec):
    type: ClassVar[str] = "detect"
    threads: ClassVar[int] = 2  # the batcher and the completion thread
    about: ClassVar[str] = "batches frames across cameras, runs the detector, decodes boxes (NMS)"

    model: str = option(doc="the detector (a name under `models`)")
    fps: float | None = option(None, check=positive, shown="every frame", doc=FPS_DOC)
    motion: bool = option(False, doc=MOTION_DOC)
    refresh_s: float = option(10.0, check=positive, doc=REFRESH_DOC)
    regions: bool = option(False, doc=REGIONS_DOC)
    border_s: float = option(0.5, check=non_negative, doc=BORDER_DOC)
    cameras: dict[str, DetectCameraSpec] = option(factory=dict, doc="per camera id: its own `fps`, `motion`, "
                                                                    "`refresh_s`, `regions`, `border_s`")

    def rate(self, camera: str) -> DetectRate:
        """The camera's detection rate: its own overrides, else the stage's options."""
        own = self.cameras.get(camera, DetectCameraSpec())
        pick = lambda mine, stage: stage if mine is None else mine  # noqa: E731
        return DetectRate(pick(own.fps, self.fps), pick(own.motion, self.motion),
                          pick(own.refresh_s, self.refresh_s), pick(own.regions, self.regions),
                          pick(own.border_s, self.border_s))

    def check(self, ctx: GraphContext, r: Reader) -> None:
        _check_model(r, ctx, f"{self.path}.model", self.model, classifier=False)
        needs = "regions are cut around motion: needs `motion: true`"
        if self.regions and not self.motion:
            r.problem(f"{self.path}.regions", needs)
        for cam, own in self.cameras.items():
            if cam not in ctx.cameras:
                r.problem(f"{self.path}.cameras.{cam}", "no camera with this id")
            rate = self.rate(cam)
            if rate.regions and not rate.motion and (own.regions is not None or own.motion is not None):
                r.problem(f"{self.path}.cameras.{cam}.regions", needs)

    def for_cameras(self, cameras: list[str]) -> "DetectSpec":
        """The same stage for some of the cameras only."""
        return replace(self, cameras={c: s for c, s in self.cameras.items() if c in cameras})


@dataclass(kw_only=True)
class TrackSpec(StageSpec):
    type: ClassVar[str] = "track"
    about: ClassVar[str] = "ByteTrack-style tracker: a stable id per object and camera"

    high_threshold: float = option(0.4, check=within(0, 1),
                                   doc="detections at or above this score are matched first")
    new_track_threshold: float = option(0.4, check=within(0, 1),
                                        doc="an unmatched detection starts a track from here (as strong as "
                                            "`high_threshold`: a box matched is a box worth starting from)")
    match_iou: float = option(0.2, check=within(0, 1),
                              doc="IoU times the detection's score needed to match a high-score detection")
    low_match_iou: float = option(0.5, check=within(0, 1), doc="IoU needed to match a low-score detection")
    confirm_iou: float = option(0.3, check=within(0, 1),
                                doc="IoU times the detection's score needed to match a tentative track")
    confirm_score: float = option(0.9, check=non_negative,
                                  doc="a tentative track is confirmed on a later match once its detections' scores "
                                      "add up to this (two sightings at 0.45); each miss, and a start inside a track "
                                      "or where a tentative one failed, asks for more")
    max_age: int = option(30, check=positive, doc="updates a lost track is kept for re-identification: detector runs "
                                                  "that looked at it (frames the detector does not see, with `stride`, "
                                                  "`detect.fps` or `motion`, age no track)")
    stationary_s: float = option(10.0, check=positive,
                                 doc="seconds of the camera's time an object's box stays where it stopped before it "
                                     "is stationary: kept without re-detection until a run looks at it (motion "
                                     "touching it, `detect.refresh_s`), counted apart by zones")
    class_aware: bool = option(True, doc="match only detections of the track's class")


@dataclass(kw_only=True)
class ClassifySpec(StageSpec):
    type: ClassVar[str] = "classify"
    threads: ClassVar[int] = 2
    about: ClassVar[str] = "a secondary classifier on crops, batched across frames and cameras"

    model: str = option(doc="the classifier (a name under `models`)")
    name: str | None = option(None, shown="the model's name",
                              doc="names this classifier's labels in the JSON lines and on the video")
    classes: list[str] | None = option(None, shown="all", doc="detector classes to classify")
    min_size: float = option(24.0, check=non_negative, doc="skip boxes smaller than this (either side, pixels)")
    margin: float = option(0.0, check=non_negative, doc="grow each box by this fraction on every side")
    per_track: bool = option(False, doc="classify a track once, then only when due (needs `track`)")
    reclassify_interval: int = option(15, check=positive, doc="per track: classify again after this many frames")
    regrow: float = option(2.0, check=positive, doc="per track: classify again when the box area grows by this")

    @property
    def stage_name(self) -> str:
        return self.name or self.model or self.type

    def check(self, ctx: GraphContext, r: Reader) -> None:
        _check_model(r, ctx, f"{self.path}.model", self.model, classifier=True)
        _detector_classes(r, ctx, f"{self.path}.classes", self.classes)
        if self.per_track:
            _needs_tracker(r, ctx, self.path)


MIN_FRAMES_DOC = ("a change of side counts once the object has been on the new side this many frames (a detection "
                  "confirms it; frames the detector did not see count as time there)")
MIN_DISTANCE_DOC = "... or once it is this many pixels past the line or edge"


@dataclass(kw_only=True)
class _CountingSpec:
    """What lines and zones share: which objects count, and when a change of side does."""

    classes: list[str] | None = option(None, shown="all", doc="count only these classes")
    min_frames: int = option(3, check=positive, doc=MIN_FRAMES_DOC)
    min_distance: float | None = option(None, check=positive, shown="off", doc=MIN_DISTANCE_DOC)


@dataclass(kw_only=True)
class LineSpec(_CountingSpec):
    name: str = option(doc="the line's name (events, counts)")
    points: list[tuple[float, float]] = option(read=read_points(2), doc="two [x, y] points in frame pixels")


@dataclass(kw_only=True)
class ZoneSpec(_CountingSpec):
    name: str = option(doc="the zone's name (events, counts)")
    polygon: list[tuple[float, float]] = option(read=read_points(None), doc="3 or more [x, y] points")
    alert_stationary: bool = option(True, doc="send a `stationary` event when an object inside stops (for "
                                              "`track.stationary_s`) and `moving` when it goes on (false: that "
                                              "state shows in `/api/cameras`, the counts and the JSON lines only)")


def count_problem(items: list, limit: int, what: str) -> str | None:
    """Lines and zones are checked against every track on every frame: their number is bounded."""
    return None if len(items) <= limit else over(len(items), limit, what)


@dataclass(kw_only=True)
class CameraAnalyticsSpec:
    lines: list[LineSpec] = option(factory=list, check=lambda v: count_problem(v, LINES, "lines per camera"),
                                   doc=f"counting lines (at most {LINES})")
    zones: list[ZoneSpec] = option(factory=list, check=lambda v: count_problem(v, ZONES, "zones per camera"),
                                   doc=f"zones (at most {ZONES})")


@dataclass(kw_only=True)
class AnalyticsSpec(StageSpec):
    type: ClassVar[str] = "analytics"
    about: ClassVar[str] = "line crossings (in/out per class) and zones (enter/exit, inside)"

    cameras: dict[str, CameraAnalyticsSpec] = option(factory=dict, doc="per camera id: its lines and zones")
    forget_after: int = internal(30)  # the tracker's max_age, in detector runs: a track unseen longer is gone

    def check(self, ctx: GraphContext, r: Reader) -> None:
        _needs_tracker(r, ctx, self.path)
        tracker = ctx.last(TrackSpec)
        if tracker is not None:
            self.forget_after = tracker.max_age
        for cam, spec in self.cameras.items():
            where = f"{self.path}.cameras.{cam}"
            if cam not in ctx.cameras:
                r.problem(where, "no camera with this id")
            names: set[str] = set()
            for kind, items in (("lines", spec.lines), ("zones", spec.zones)):
                for i, item in enumerate(items):
                    _detector_classes(r, ctx, f"{where}.{kind}[{i}].classes", item.classes)
                    if item.name in names:
                        r.problem(f"{where}.{kind}[{i}].name", f"duplicate name {item.name!r} on this camera")
                    names.add(item.name)

    def for_cameras(self, cameras: list[str]) -> "AnalyticsSpec":
        """The same analytics for some of the cameras only."""
        return replace(self, cameras={c: s for c, s in self.cameras.items() if c in cameras})


@dataclass(kw_only=True)
class AnnotateSpec(StageSpec):
    type: ClassVar[str] = "annotate"
    about: ClassVar[str] = "draws boxes, labels, lines and zones on the frame"


STAGE_SPECS: dict[str, type[StageSpec]] = {s.type: s for s in (DetectSpec, TrackSpec, ClassifySpec, AnalyticsSpec,
                                                                 AnnotateSpec)}


def entry_stage(graph: list[StageSpec]) -> DetectSpec | None:
    """The stage the ingress feeds: the graph's first, a detect stage. This rule lives here
    only; `read_graph` refuses a graph it does not hold for."""
    first = graph[0] if graph else None
    return first if isinstance(first, DetectSpec) else None


def _entry_problems(r: Reader, stages: list[StageSpec]) -> list[StageSpec]:
    """Report a graph without its entry stage, or with a detect stage anywhere else; the
    misplaced stages are returned."""
    if stages and entry_stage(stages) is None:
        r.problem("graph[0]", "the first stage must be 'detect'")
    entry = entry_stage(stages)
    misplaced = [s for s in stages if isinstance(s, DetectSpec) and s is not entry]
    for spec in misplaced:
        r.problem(spec.path, "only the first stage may be a detect stage")
    return misplaced


def read_graph(r: Reader, value: Any, models: dict[str, ModelConfig], cameras: list[str]) -> list[StageSpec]:
    """The stages in order, each read into its spec and checked against what precedes it."""
    if not isinstance(value, list) or not value:
        r.problem("graph", "required: a list of stages, the first one a detect stage")
        return []
    stages: list[StageSpec] = []
    for i, entry in enumerate(value):
        path = f"graph[{i}]"
        if isinstance(entry, str):
            entry = {entry: {}}
        if not isinstance(entry, dict) or len(entry) != 1:
            r.problem(path, "expected one stage: '- type: {options}'")
            continue
        (stype, options), = entry.items()
        spec_cls = STAGE_SPECS.get(stype)
        if spec_cls is None:
            r.problem(path, f"unknown stage type {stype!r} (known: {', '.join(STAGE_SPECS)})")
            continue
        stages.append(r.record(spec_cls, options, f"{path}.{stype}", {"path": f"{path}.{stype}"}))
    extra_entries = _entry_problems(r, stages)
    names: dict[str, str] = {}
    for i, spec in enumerate(stages):
        spec.check(GraphContext(models, cameras, stages[:i]), r)
        if any(spec is m for m in extra_entries):
            continue  # reported already
        if spec.stage_name in names:
            r.problem(f"{spec.path}.name", f"stage name {spec.stage_name!r} is already used by {names[spec.stage_name]}"
                                           f" (give one of them a `name`)")
        names.setdefault(spec.stage_name, spec.path)
    return stages
