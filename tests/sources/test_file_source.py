"""File sources: stride, max_fps on the camera's timeline, looping, frame accounting."""
from __future__ import annotations

from conftest import detector_model, frame_count, read_jsonl, run_pipeline
from pipeline.metrics.report import progress_line, summary_table
from pipeline.status_view import read_status


def run(tmp_path, write_config, model_path, source: dict, max_frames=None) -> tuple[dict, list[dict]]:
    cfg = {"sources": [{"id": "a", **source}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}], "outputs": {"dir": str(tmp_path / "out")}}
    snap = run_pipeline(cfg, write_config, str(tmp_path / "out"), max_frames=max_frames)
    return snap.cameras["a"], read_jsonl(str(tmp_path / "out" / "detections.jsonl"))


def test_stride_processes_every_nth_frame_and_counts_the_rest_as_skipped(tmp_path, write_config, model_path,
                                                                          short_clips):
    cam, records = run(tmp_path, write_config, model_path, {"uri": short_clips["bikes"], "stride": 3})
    assert [r["seq"] for r in records] == list(range(0, 40, 3))
    assert cam.frames_in == 40 and cam.skipped == {"stride": 40 - 14} and cam.dropped == {}


def test_max_fps_keeps_frames_spaced_and_counts_the_rest_as_skipped_never_as_drops(tmp_path, write_config,
                                                                                   model_path, short_clips):
    cfg = {"sources": [{"id": "a", "uri": short_clips["bikes"], "max_fps": 5}],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(tmp_path / "out")}}
    snap = run_pipeline(cfg, write_config, str(tmp_path / "out"))
    cam, records = snap.cameras["a"], read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
    times = [r["time"] for r in records]
    assert len(records) == 8  # 40 frames at 25 fps = 1.6 s of video at 5 fps
    assert all(abs((b - a) - 0.2) < 1e-6 for a, b in zip(times, times[1:]))
    assert cam.skipped == {"max_fps": 32} and cam.dropped == {} and cam.dropped_total == 0
    assert "drop" not in progress_line(snap)  # the periodic log line
    assert read_status("run", snap.to_dict()).cameras[0].drops == 0  # `pipeline status`, from /api/cameras
    row = next(line for line in summary_table(snap).splitlines() if line.startswith("a "))
    assert "skipped: max_fps 32" in row and "drops:" not in row and row.split()[4] == "0"  # the dropped column
    assert frame_count(str(tmp_path / "out" / "a.mp4")) == 8


def test_a_looped_file_replays_with_increasing_timestamps(tmp_path, write_config, model_path, short_clips):
    cam, records = run(tmp_path, write_config, model_path, {"uri": short_clips["bikes"], "loop": True},
                       max_frames=100)
    assert cam.processed == 100
    times = [r["time"] for r in records]
    assert all(b > a for a, b in zip(times, times[1:]))
    assert abs(times[-1] - 99 / 25) < 1e-6  # one continuous 25 fps timeline over the passes
