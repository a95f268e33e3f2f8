"""The density search (`pipeline.bench.density`): how a level is judged, how the camera
count is searched, and one tiny real round of both designs."""
from __future__ import annotations

import av
import pytest

from conftest import detector_model
from pipeline.bench import camera_clips as clips, density
from pipeline.config import parse_config
from pipeline.metrics.snapshot import CameraSnapshot, Latency, Snapshot


def config(tmp_path, sample_path, model_path, outputs: dict | None = None):
    return parse_config({"sources": [{"id": "cam", "uri": sample_path("bikes.mp4")}],
                         "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
                         "outputs": {"dir": str(tmp_path / "out"), **(outputs or {})}}, tmp_path)


def snap(p99: float, decoded: int = 1000, dropped: int = 0, on_purpose: int = 0, processed: int | None = None):
    cam = CameraSnapshot(frames_in=decoded, processed=decoded - dropped if processed is None else processed,
                         dropped={"queue_full": dropped}, skipped={"max_fps": on_purpose})
    return Snapshot(processed=cam.processed, latency=Latency(p50_ms=p99 / 2, p99_ms=p99), cameras={"cam0": cam})


def test_a_level_is_held_under_1_percent_dropped_and_a_p99_under_1_s(tmp_path, sample_path, model_path):
    cfg = config(tmp_path, sample_path, model_path, {"jsonl": {"enabled": False}})
    judge = lambda s: density.judge(cfg, s, str(tmp_path), 1, 10.0, 5.0, 0.1)  # noqa: E731
    assert judge(snap(999.0, dropped=9, on_purpose=500))["held"]  # frames skipped on purpose are not lost
    assert judge(snap(999.0, dropped=10))["why"] == "1.0% dropped"
    assert judge(snap(1000.0))["why"] == "P99 1000.0 ms"
    assert judge(snap(200.0))["cpu_percent"] == 50.0


def test_the_warm_up_is_not_judged(tmp_path, sample_path, model_path):
    cfg = config(tmp_path, sample_path, model_path, {"jsonl": {"enabled": False}})
    early, final = snap(5000.0, decoded=100, dropped=50), snap(5000.0, decoded=1100, dropped=55)  # a slow start
    got = density.judge(cfg, final, str(tmp_path), 1, 10.0, 5.0, None, early, [0.1] * 99 + [2.0])
    assert got["held"] and (got["decoded"], got["dropped"], got["p99_ms"]) == (1000, 0.005, 119.0)


def test_a_level_whose_json_lines_miss_frames_is_not_held(tmp_path, sample_path, model_path):
    cfg = config(tmp_path, sample_path, model_path)
    (tmp_path / "detections.jsonl").write_text('{"camera": "cam0"}\n' * 999)
    got = density.judge(cfg, snap(100.0), str(tmp_path), 1, 10.0, 5.0, None)
    assert not got["held"] and got["why"] == "JSON lines short for cam0"


@pytest.mark.parametrize("capacity,probed", [(5, [1, 2, 4, 8, 6, 5]), (0, [1]), (1, [1, 2]), (4, [1, 2, 4, 8, 6, 5])])
def test_the_search_doubles_then_bisects(capacity, probed):
    seen = []

    def level(n):
        seen.append(n)
        return {"cameras": n, "held": n <= capacity, "why": "", "dropped": 0.0, "p99_ms": 1.0, "cpu_percent": 1.0}

    assert density.search(level)["held"] == capacity and seen == probed


def test_a_round_of_both_designs_runs_live_cameras_of_the_clip(tmp_path, sample_path, model_path):
    clip = clips.camera_clip(tmp_path / "clip.mp4", clips.Encoding(size=(320, 180), fps=5), seconds=1,
                             source=sample_path("bikes.mp4"))
    cfg = config(tmp_path, sample_path, model_path, {"video": {"enabled": False}})
    result = density.bench_density(cfg, clip, 5, seconds=1.5, runs=1, limit=1, scenarios=("in step",))
    assert set(result["held"]) == {"in step: as configured", "in step: default outputs"}
    for rounds in result["rounds"].values():
        (level,) = rounds[0]["levels"]
        assert level["cameras"] == 1 and level["decoded"] >= 5 and level["processed"] > 0
        assert "JSON lines short" not in level["why"]
    assert "| in step: as configured | 1 | 1 |" in density.table(result)


def test_with_a_detect_clip_every_camera_records_the_clip_and_analyses_the_sub_stream(tmp_path, sample_path,
                                                                                       model_path):
    cfg = config(tmp_path, sample_path, model_path)
    cams = density.with_density_cameras(cfg, "/clips/main.mp4", 3, 15.0, "/clips/sub.mp4").sources
    assert [(c.uri, c.detect_uri, c.live) for c in cams] == [("/clips/main.mp4", "/clips/sub.mp4", True)] * 3
    assert density.with_density_cameras(cfg, "/clips/main.mp4", 1, 15.0).sources[0].detect_uri is None


def test_spread_cameras_start_the_clip_and_its_sub_stream_at_the_same_keyframe_spread_over_it(tmp_path, sample_path,
                                                                                             model_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_CLIPS", str(tmp_path / "cache"))
    small = clips.Encoding(size=(320, 180), fps=10, gop_s=1.0)
    main = clips.camera_clip(tmp_path / "main.mp4", small, source=sample_path("vtest.mp4"), seconds=8)
    sub = clips.sub_stream(main, tmp_path / "sub.mp4", (160, 90))
    cams = density.with_density_cameras(config(tmp_path, sample_path, model_path), main, 4, 10.0, sub,
                                        spread=True).sources
    firsts = []
    for cam in cams:
        with av.open(cam.uri) as m, av.open(cam.detect_uri) as s:
            one, other = next(m.decode(video=0)), next(s.decode(video=0))
        firsts.append(one.to_ndarray(format="gray")[::2, ::2].astype(int))
        assert abs(firsts[-1] - other.to_ndarray(format="gray").astype(int)).mean() < 8  # the same picture
    assert len({f.tobytes() for f in firsts}) == 4  # four cameras, four starts: none in step


def test_a_level_spread_over_host_processes_is_judged_on_all_their_cameras_and_json_lines_and_can_be_watched(
        tmp_path, sample_path, model_path):
    clip = clips.camera_clip(tmp_path / "clip.mp4", clips.Encoding(size=(320, 180), fps=5), seconds=1,
                             source=sample_path("bikes.mp4"))
    cfg = config(tmp_path, sample_path, model_path, {"video": {"enabled": False}})
    level = density.run_level(cfg, clip, 2, 5, seconds=4.0, processes=2, watched=1)
    assert level["cameras"] == 2 and level["decoded"] >= 10 and level["processed"] >= 10
    assert "JSON lines short" not in level["why"]  # one file per camera, as `run --processes` writes
    # another process read one camera's live video through the run's page: its packets and records
    assert level["watched"]["sockets"] == 1 and level["watched"]["bytes"] > 0 and level["watched"]["records"] > 0
