"""What gated and every-frame runs must agree on, as the gating benchmark judges it:
counts within 5% or 1, and every track longer than a second found."""
from pipeline.bench.gating import count_rows, found
from pipeline.metrics.snapshot import CameraSnapshot, Snapshot


def snap(**per_line) -> Snapshot:
    return Snapshot(cameras={"cam": CameraSnapshot(counts={"door": {"in": per_line}})})


def test_counts_agree_within_five_percent_or_one():
    rows = {k[3]: (a, b, ok) for k, a, b, ok in count_rows(snap(person=100, car=2, bus=0), snap(person=96, car=1,
                                                                                                 truck=2))}
    assert rows == {"person": (100, 96, True), "car": (2, 1, True), "bus": (0, 0, True), "truck": (0, 2, False)}
    assert not count_rows(snap(person=100), snap(person=94))[0][3]


def rows(tracks: dict[int, list[tuple[int, list]]], frames: int, rate: float = 10.0) -> list[dict]:
    """JSON lines rows: track id -> [(seq, box)]."""
    out = [{"camera": "cam", "seq": s, "time": s / rate, "detections": []} for s in range(frames)]
    for tid, path in tracks.items():
        for seq, box in path:
            out[seq]["detections"].append({"class": "person", "box": box, "track": tid})
    return out


def test_a_track_over_a_second_counts_as_found_where_the_gated_run_has_its_box_on_half_its_frames():
    walk = [(s, [10 + s, 10, 40 + s, 90]) for s in range(30)]     # 2.9 s
    blip = [(s, [200, 10, 230, 90]) for s in range(5)]             # 0.4 s: too short to count
    every = rows({1: walk, 2: blip}, 30)
    half = rows({7: [(s, [12 + s, 12, 42 + s, 92]) for s in range(0, 30, 2)]}, 30)  # every other frame, its own id
    assert found(every, half) == (1, 1, [])
    gone = rows({7: [(s, b) for s, b in walk[:10]]}, 30)
    assert found(every, gone) == (0, 1, [("cam", 1)])


def test_the_detector_runs_are_counted_per_second_of_each_cameras_time_and_charted(tmp_path):
    from pipeline.bench.gating import plot, runs_per_second

    gated = [{"camera": "cam", "time": s / 10, "detected": s % 5 == 0 or 20 <= s < 30} for s in range(35)]
    every = [dict(r, detected=True) for r in gated]
    assert runs_per_second(gated) == {"cam": [2, 2, 10, 1]}
    assert runs_per_second(every + [{"camera": "other", "time": 0.0, "detected": True}]) == {
        "cam": [10, 10, 10, 5], "other": [1]}
    result = {"runs_per_s": {"every": runs_per_second(every), "gated": runs_per_second(gated)}}
    plot({"clip.mp4": result, "idle.mp4": result}, str(tmp_path / "runs.png"))
    assert (tmp_path / "runs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_gated_config_is_gated_as_asked_for_every_camera_whatever_its_own_overrides(tmp_path, sample_path,
                                                                                        model_path):
    from conftest import detector_model
    from pipeline.bench.gating import gated
    from pipeline.config import DetectSpec, parse_config

    clip = sample_path("bikes.mp4")
    config = parse_config({"sources": [{"id": "a", "uri": clip}, {"id": "b", "uri": clip}],
                           "models": {"det": detector_model(model_path)},
                           "graph": [{"detect": {"model": "det", "cameras": {"b": {"fps": 1, "motion": False,
                                                                                    "border_s": 2}}}}, "track"]},
                          tmp_path)
    for border_s, own in ((None, 2.0), (0.0, 0.0)):
        (detect,) = [s for s in gated(config, 5.0, 10.0, False, border_s).graph if isinstance(s, DetectSpec)]
        for cam in ("a", "b"):
            rate = detect.rate(cam)
            assert (rate.fps, rate.motion, rate.refresh_s) == (5.0, True, 10.0)
        assert detect.rate("b").border_s == own and detect.rate("a").border_s == (0.5 if border_s is None else 0.0)
