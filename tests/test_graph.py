"""The graph's capacity follows its cameras: a camera added while running gets what a
camera configured at start gets."""
from dataclasses import replace

import pipeline.engines.plan as plan
from conftest import detector_model
from pipeline.config import load_config
from pipeline.graph import Pipeline


def test_cameras_added_to_an_empty_pipeline_get_the_sink_workers_of_cameras_configured_at_start(
        monkeypatch, tmp_path, short_clips, model_path, write_config):
    """Every host of a cluster starts with no camera: its cameras must not all share one
    encoder worker when the cores allow one each."""
    monkeypatch.setattr(plan, "visible_cores", lambda: 8)  # a bigger machine than this one
    cfg = {"sources": [{"id": f"cam{i}", "uri": short_clips["bikes"], "realtime": True} for i in range(4)],
           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": str(tmp_path / "out")}, "runtime": {"threads": 8}}
    config = load_config(write_config(cfg))
    configured = Pipeline(config)
    try:
        at_start = configured.sink.workers
    finally:
        configured.close()
    empty = Pipeline(replace(config, sources=[]))
    empty.start()
    try:
        assert empty.sink.workers == 0  # no camera, nothing to encode
        for source in config.sources:
            empty.add_camera(source)
        assert empty.sink.workers == at_start == 4
        # threads already running differ, and the side outputs' (the store's writer) are
        # counted as they start: the configured pipeline never started
        planned = lambda p: p.plan.total - p.plan.base_threads - p.plan.side_threads  # noqa: E731
        assert empty.plan.cameras == 4 and planned(empty) == planned(configured)
    finally:
        empty.stop(abort=True)
        empty.close(timeout=10)


def test_the_tracker_hands_its_tracks_back_only_to_cameras_gated_on_motion(tmp_path, short_clips, model_path,
                                                                            write_config):
    """The tracks go back to a camera's gate on every frame; with nobody reading them they
    would pile up for as long as the camera runs."""
    cfg = {"sources": [{"id": cam, "uri": short_clips["vtest"]} for cam in ("gated", "every")],
           "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det", "cameras": {"gated": {"motion": True}}}}, "track"],
           "outputs": {"dir": str(tmp_path / "out"), "video": {"enabled": False}}}
    p = Pipeline(load_config(write_config(cfg)))
    try:
        assert p.feedbacks.get("gated") is not None and p.feedbacks.get("every") is None
    finally:
        p.close()
