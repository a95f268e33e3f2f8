"""The detector only when something moves, on a made clip with still stretches (sensor
noise only) around a person walking across; and file runs that give the same JSON lines
every time, on a fast and on a paced (slow) run."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import ROOT, read_jsonl, run_pipeline, detector_model
from pipeline.config import DetectSpec, MotionConfig
from pipeline.config.stages import DetectRate
from pipeline.sources.detect_gate import DetectGate, phase_of
from pipeline.runtime.track_feedback import LAG_S

pytest.importorskip("skimage.data", reason="scikit-image provides the photos moved in the synthetic clip")
from synthetic import Mover, picture, render  # noqa: E402

FPS = 15
BORDER_S = DetectSpec.__dataclass_fields__["border_s"].default
STILL, WALK = 30, 30  # frames: still, a person walks across, still again


@pytest.fixture(scope="module")
def idle_clip(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("idle") / "idle.mp4")
    person = Mover(picture("astronaut", 160), (-40, 150), (520, 150), first=STILL, last=STILL + WALK - 1)
    render([person], path, frames=2 * STILL + WALK, size=(640, 360), fps=FPS, noise=3.0)
    return path


def gated_config(model_path, clip: str, **detect) -> dict:
    return {"sources": [{"id": "lab", "uri": clip}], "models": {"det": detector_model(model_path)},
            "graph": [{"detect": {"model": "det", **detect}}, "track",
                      {"analytics": {"cameras": {"lab": {"lines": [
                          {"name": "middle", "points": [[320, 0], [320, 359]], "classes": ["person"]}]}}}}],
            "outputs": {"video": {"enabled": False}}}


def test_the_detector_runs_on_the_moving_frames_of_the_rate_and_once_per_refresh_s_when_still(
        tmp_path, idle_clip, model_path, write_config):
    every = run_pipeline(gated_config(model_path, idle_clip), write_config, str(tmp_path / "every"))
    snap = run_pipeline(gated_config(model_path, idle_clip, fps=5, motion=True, refresh_s=1.0), write_config,
                        str(tmp_path / "gated"))
    rows = read_jsonl(str(tmp_path / "gated" / "detections.jsonl"))
    assert len(rows) == 2 * STILL + WALK
    ran = [r["seq"] for r in rows if r["detected"]]
    walking = [s for s in ran if STILL <= s < STILL + WALK]
    in_rate = DetectGate(DetectRate(fps=5), MotionConfig(), phase=phase_of("lab"))  # the camera's slots
    rate = [s for s in range(len(rows)) if in_rate.plan(None, s / FPS).run and STILL <= s < STILL + WALK]
    assert len(rate) == WALK // 3
    assert set(rate) <= set(walking)  # every frame of the rate while it moves
    crossed = next(r["seq"] for r in read_jsonl(str(tmp_path / "every" / "detections.jsonl")) if r.get("events"))
    between = [s for s in walking if s not in rate]  # and the frames between, only while it is at the line
    assert between and all(abs(s - crossed) / FPS <= BORDER_S + 2 / FPS for s in between), (crossed, between)
    # once it has gone, the tracks seen moving `LAG_S` before still run the detector; then it is still
    after = STILL + WALK + LAG_S * FPS + 3
    for stretch in ([s for s in ran if s < STILL], [s for s in ran if s >= after]):
        assert stretch and all((b - a) / FPS >= 1.0 - 1e-6 for a, b in zip(stretch, stretch[1:])), ran
    counts = snap.cameras["lab"].detector
    assert counts.runs == len(ran) == snap.engines["det"].items
    assert counts.predicted == len(rows) - len(ran) and 0 < counts.gated < counts.predicted
    assert every.cameras["lab"].detector.runs == len(rows)
    # what it must agree on: the crossing
    assert snap.cameras["lab"].counts == every.cameras["lab"].counts == {"middle": {"out": {"person": 1}}}


def test_two_runs_of_the_tracking_config_give_the_same_json_lines_on_a_fast_and_a_paced_run(
        tmp_path, short_clips, model_path, write_config):
    """The JSON lines of a file run are a function of its files: the per-track labels, the
    events (no wall clock in them) and the order of the shared file's lines."""
    config = yaml.safe_load((ROOT / "configs" / "tracking.yaml").read_text())
    clips = {"campus": short_clips["vtest"], "street": short_clips["bikes"]}
    for source in config["sources"]:
        source["uri"] = clips[source["id"]]
    for model in config["models"].values():
        model["path"] = model_path(Path(model["path"]).name)
        model["labels"] = str(ROOT / "models" / Path(model["labels"]).name)
    config["outputs"] = {"video": {"enabled": False}}
    texts = []
    for run, paced in (("fast", False), ("paced", True)):
        for source in config["sources"]:
            source["realtime"] = paced
        run_pipeline(config, write_config, str(tmp_path / run))
        texts.append((tmp_path / run / "detections.jsonl").read_text())
    rows = [yaml.safe_load(line) for line in texts[0].splitlines()]
    assert len(rows) == 80 and any(r.get("events") for r in rows)
    assert texts[0] == texts[1]


def test_a_parked_object_in_a_zone_is_one_event_stationary_and_not_re_detected_while_nothing_moves(
        tmp_path, model_path, write_config):
    clip = str(tmp_path / "parks.mp4")
    walk_end, frames = 44, 165  # walks in until frame 44, then stands for 8 s
    person = Mover(picture("astronaut", 160), (-40, 150), (400, 150), first=15, last=walk_end, stays=True)
    render([person], clip, frames=frames, size=(640, 360), fps=FPS, noise=3.0)
    config = gated_config(model_path, clip, fps=5, motion=True, refresh_s=2.0)
    config["sources"][0]["motion"] = {"background_s": 1.0}  # it fades into the background within seconds
    config["graph"][1] = {"track": {"stationary_s": 1.0}}
    config["graph"][2] = {"analytics": {"cameras": {"lab": {"zones": [
        {"name": "bay", "polygon": [[330, 0], [639, 0], [639, 359], [330, 359]]}]}}}}
    snap = run_pipeline(config, write_config, str(tmp_path / "out"))
    rows = read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
    events = [(e["event"], e["track"]) for r in rows for e in r.get("events", [])]
    assert [e for e, _ in events] == ["enter", "stationary"] and len({t for _, t in events}) == 1
    still_from = next(r["seq"] for r in rows if any(e["event"] == "stationary" for e in r.get("events", [])))
    assert still_from <= walk_end + 2 * FPS
    assert all(len(r["detections"]) == 1 and r["detections"][0].get("stationary") for r in rows[still_from:])
    # once nothing moves (its track settled), only refreshes run the detector on it: from
    # some run on, every run is refresh_s after the one before, and that run comes early
    ran = [r["seq"] for r in rows[still_from:] if r["detected"]]
    settled = next(i for i in range(len(ran)) if all(b - a >= 2.0 * FPS - 1e-6 for a, b in zip(ran[i:], ran[i + 1:])))
    assert ran[settled] < frames - 4 * FPS and len(ran) - settled >= 3, ran
    assert snap.cameras["lab"].stationary == {"bay": 1}
