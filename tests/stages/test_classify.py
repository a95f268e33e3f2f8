"""The classify stage without a model: per-track state, frames waiting for their track's
first label, and one attribute set per classifier."""
import time

import numpy as np

from fake_engine import FakeEngine
from pipeline.config import BatchingConfig, ClassifySpec, ModelConfig
from pipeline.engines.batching import BatchPolicy
from pipeline.frames import ClassNames, Detections, EndOfStream, Frame
from pipeline.metrics.registry import Metrics
from pipeline.runtime.stage import RunControl
from pipeline.stages.classify import ClassifyStage
from pipeline.stages.track_labels import FORGET_AFTER, FORGET_CHECK_EVERY, TrackLabel, forget_stale

DETECTOR = ClassNames(["car", "person"])
LABELS = ["dark", "grey", "light"]


def classifier() -> ModelConfig:
    return ModelConfig(name="shade", path="", layout="classifier", input_size=(8, 8), letterbox="stretch",
                       labels=LABELS, batching=BatchingConfig(max_batch=8, max_wait_ms=2))


def by_brightness(batch: np.ndarray) -> list[np.ndarray]:
    """Logits that pick 'dark', 'grey' or 'light' from the crop's mean grey value."""
    cls = np.clip(batch.mean(axis=(1, 2, 3)) // 86, 0, 2).astype(int)
    return [np.eye(3, dtype=np.float32)[cls] * 10]


def frame(seq: int, shade: int, track: int | None = 1, order: int | None = None) -> Frame:
    """A frame with one tracked detection (`track`), or with none (`track=None`)."""
    image = np.full((100, 100, 3), shade, np.uint8)
    det = Detections.empty(DETECTOR)
    det.track_id = np.zeros((0,), np.int64)
    if track is not None:
        det = Detections(np.array([[10, 10, 60, 60]], np.float32), np.array([0.9], np.float32), np.array([0]),
                         names=DETECTOR, track_id=np.array([track]))
    return Frame("cam", seq, seq, None, image, time.perf_counter(), order=seq if order is None else order,
                 detections=det)


def run(stage: ClassifyStage, items: list, pace_s: float = 0.0) -> list:
    out: list = []
    stage.emit = out.append
    stage.start()
    for item in items:
        stage.accept(item)
        time.sleep(pace_s)
    deadline = time.monotonic() + 20
    while not (out and isinstance(out[-1], EndOfStream)) and time.monotonic() < deadline:
        time.sleep(0.01)
    stage.control.abort.set()
    stage.close()
    return out


def test_frames_wait_for_their_tracks_first_label_and_share_it():
    """A track's first classification is slow; the frames after it must not be classified
    again, must wait for that label, and leave in order."""
    engine = FakeEngine(by_brightness, (3, 8, 8), delay=0.3)
    metrics = Metrics()
    spec = ClassifySpec(model="shade", name="shade", per_track=True, reclassify_interval=100, min_size=1)
    policy = BatchPolicy.of(classifier().batching)
    stage = ClassifyStage(spec, classifier(), engine, policy, DETECTOR, metrics, RunControl(), 16)
    out = run(stage, [frame(i, 240) for i in range(6)] + [EndOfStream("cam", order=6)])
    frames = out[:-1]
    assert [f.seq for f in frames] == list(range(6))
    assert engine.batches == [1]  # one crop classified, for the whole track
    for f in frames:
        attr = f.detections.attributes["shade"]
        assert attr.names(int(attr.class_id[0])) == "light"
    assert metrics.stages["shade"].counters["calls_saved"] == 5


def feed(stage: ClassifyStage, out: list, items: list) -> None:
    """Hands the items to the started stage and waits until all of them have left it."""
    expected = len(out) + len(items)
    for item in items:
        stage.accept(item)
    deadline = time.monotonic() + 20
    while len(out) < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(out) == expected


def test_vanished_tracks_are_forgotten_after_forget_after_updates_with_a_stride():
    """With `stride: 7`, `seq` advances by 7 per update. Track 1 passes, then the scene is
    empty (nothing to classify) for longer than FORGET_AFTER updates plus one check's
    cadence: its label state must be gone once track 2 arrives. Track 3, last seen 100
    updates (700 frames) ago, is within the window of FORGET_AFTER updates and kept."""
    engine = FakeEngine(by_brightness, (3, 8, 8))
    spec = ClassifySpec(model="shade", name="shade", per_track=True, reclassify_interval=100, min_size=1)
    stage = ClassifyStage(spec, classifier(), engine, BatchPolicy.of(classifier().batching), DETECTOR, Metrics(),
                          RunControl(), 16)
    out: list = []
    stage.emit = out.append
    stage.start()
    stride = 7
    plan = [1] * 5 + [None] * (FORGET_AFTER + FORGET_CHECK_EVERY - 100) + [3] + [None] * 100 + [2] * 5
    frames = [frame(k * stride, 240, track, order=k) for k, track in enumerate(plan)]
    try:
        feed(stage, out, frames[:5])  # track 1's label has come back: nothing of it is in flight
        feed(stage, out, frames[5:])
        assert sorted(stage.labels.tracks("cam")) == [2, 3]
        assert [f.seq for f in out] == [f.seq for f in frames]
    finally:
        stage.control.abort.set()
        stage.close()


def test_two_classifiers_keep_separate_labels_on_the_same_detection():
    det_engine_a = FakeEngine(by_brightness, (3, 8, 8))
    det_engine_b = FakeEngine(lambda b: [np.tile(np.array([[0, 0, 5]], np.float32), (len(b), 1))], (3, 8, 8))
    policy = BatchPolicy.of(classifier().batching)
    first = ClassifyStage(ClassifySpec(model="shade", name="shade", min_size=1), classifier(), det_engine_a, policy,
                          DETECTOR, Metrics(), RunControl(), 16)
    second = ClassifyStage(ClassifySpec(model="shade", name="always_light", min_size=1), classifier(), det_engine_b,
                           policy, DETECTOR, Metrics(), RunControl(), 16)
    out = run(second, run(first, [frame(0, 10), EndOfStream("cam", order=1)]))
    attrs = out[0].detections.attributes
    assert list(attrs) == ["shade", "always_light"]
    assert attrs["shade"].names(int(attrs["shade"].class_id[0])) == "dark"
    assert attrs["always_light"].names(int(attrs["always_light"].class_id[0])) == "light"


def test_classifier_forgets_tracks_gone_for_long():
    """Per-track label state stays bounded on a camera that runs for months."""
    tracks = {1: TrackLabel(seen=10), 2: TrackLabel(seen=FORGET_AFTER + 5), 3: TrackLabel(seen=0, submitted=1)}
    forget_stale(tracks, FORGET_AFTER + 20)
    assert sorted(tracks) == [2, 3]  # 1 is gone; 3 still has a classification under way


def test_per_track_labels_do_not_depend_on_the_order_classifications_come_back_in():
    """A track's shade changes while it is reclassified every 2 frames; crops come back in
    any order (random delays, several workers). Each row's label is the vote of exactly the
    classifications submitted up to its frame: the same in every run."""
    shades = [240, 240, 10, 10, 10, 130, 130, 10, 240, 240, 10, 10]

    def labels(seed: int) -> list[tuple[int, float]]:
        rng = np.random.default_rng(seed)
        engine = FakeEngine(by_brightness, (3, 8, 8), max_inflight=6, workers=4,
                            delay=lambda n: float(rng.uniform(0, 0.05)))
        spec = ClassifySpec(model="shade", name="shade", per_track=True, reclassify_interval=2, min_size=1)
        model = classifier()
        model.batching = BatchingConfig(max_batch=1, max_wait_ms=0)
        stage = ClassifyStage(spec, model, engine, BatchPolicy.of(model.batching), DETECTOR, Metrics(), RunControl(),
                              16)
        out = run(stage, [frame(i, s) for i, s in enumerate(shades)] + [EndOfStream("cam", order=len(shades))],
                  pace_s=0.02)  # classifications come back while later frames arrive
        assert [f.seq for f in out[:-1]] == list(range(len(shades)))
        attrs = [f.detections.attributes["shade"] for f in out[:-1]]
        return [(int(a.class_id[0]), round(float(a.score[0]), 6)) for a in attrs]

    first = labels(0)
    assert len({cls for cls, _ in first}) > 1  # the votes really moved
    for seed in (1, 2, 3):
        assert labels(seed) == first
