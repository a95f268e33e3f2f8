"""Config validation: every problem reported with its YAML path, before anything starts."""
from __future__ import annotations

import subprocess

import pytest

from conftest import ROOT, detector_model
from pipeline.config import ConfigError, load_config


def base(model_path, sample_path) -> dict:
    return {"sources": [{"id": "a", "uri": sample_path("bikes.mp4")}],
            "models": {"det": detector_model(model_path)},
            "graph": [{"detect": {"model": "det"}}, "annotate"]}


def test_valid_config_loads_with_typed_defaults(write_config, model_path, sample_path):
    cfg = load_config(write_config(base(model_path, sample_path)))
    assert cfg.sources[0].live is False and cfg.sources[0].queue.policy == "block"
    assert cfg.models["det"].input_size == (416, 416)
    assert cfg.models["det"].labels[0] == "person"
    assert [s.type for s in cfg.graph] == ["detect", "annotate"]


def test_rtsp_sources_default_to_live_and_drop_oldest(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["sources"].append({"id": "cam", "uri": "rtsp://127.0.0.1:8554/x"})
    cfg = load_config(write_config(data))
    assert cfg.sources[1].live and cfg.sources[1].queue.policy == "drop_oldest"


def test_relative_paths_resolve_against_the_config_folder(tmp_path, model_path, sample_path, write_config):
    import shutil

    shutil.copyfile(sample_path("bikes.mp4"), tmp_path / "clip.mp4")
    data = base(model_path, sample_path)
    data["sources"][0]["uri"] = "clip.mp4"
    cfg = load_config(write_config(data))
    assert cfg.sources[0].uri == str(tmp_path / "clip.mp4")


def test_three_mistakes_are_all_reported_with_their_paths(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["sources"].append({"id": "b", "uri": "cams/b.mp4"})
    data["models"]["det"]["score_threshold"] = 2
    data["graph"][0]["detect"]["model"] = "nope"
    with pytest.raises(ConfigError) as e:
        load_config(write_config(data))
    problems = e.value.problems
    assert "sources[1].uri: file not found: cams/b.mp4" in problems
    assert any(p.startswith("models.det.score_threshold:") for p in problems)
    assert any(p.startswith("graph[0].detect.model: unknown model 'nope'") for p in problems)
    assert len(problems) == 3


def test_special_files_are_refused_as_sources_by_path_and_by_file_url(write_config, model_path, sample_path,
                                                                       tmp_path, fifo):
    """A `file://` URL was never checked: a FIFO hung `validate` and `run` in its open."""
    pipe = fifo()
    data = base(model_path, sample_path)
    data["sources"] = [{"id": "a", "uri": pipe}, {"id": "b", "uri": f"file://{pipe}"},
                       {"id": "c", "uri": f"cache:file://{pipe}"}, {"id": "d", "uri": "/dev/zero"},
                       {"id": "e", "uri": f"file://{tmp_path}"}, {"id": "f", "uri": f"file://{tmp_path}/none.mp4"},
                       {"id": "g", "uri": f"file://{sample_path('bikes.mp4')}"}]
    with pytest.raises(ConfigError) as e:
        load_config(write_config(data))
    assert e.value.problems == [f"sources[0].uri: not a regular file (a FIFO): {pipe}",
                                f"sources[1].uri: not a regular file (a FIFO): file://{pipe}",
                                f"sources[2].uri: not a regular file (a FIFO): cache:file://{pipe}",
                                "sources[3].uri: not a regular file (a character device): /dev/zero",
                                f"sources[4].uri: not a regular file (a directory): file://{tmp_path}",
                                f"sources[5].uri: file not found: file://{tmp_path}/none.mp4"]


def test_type_errors_name_the_field(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["models"]["det"]["batching"]["max_batch"] = "four"
    data["sources"][0]["queue"] = {"policy": "leaky"}
    data["models"]["det"]["input_size"] = [416]
    with pytest.raises(ConfigError) as e:
        load_config(write_config(data))
    text = str(e.value)
    assert "models.det.batching.max_batch: expected an integer" in text
    assert "sources[0].queue.policy: must be one of block, drop_oldest" in text
    assert "models.det.input_size:" in text


def test_unknown_keys_and_duplicate_ids_are_errors(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["sources"].append({"id": "a", "uri": sample_path("vtest.mp4"), "fps": 3})
    with pytest.raises(ConfigError) as e:
        load_config(write_config(data))
    assert "sources[1].id: duplicate camera id 'a'" in e.value.problems
    assert any(p.startswith("sources[1].fps: unknown key") for p in e.value.problems)


def test_first_stage_must_be_a_detector(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["graph"] = ["annotate", {"detect": {"model": "det"}}]
    with pytest.raises(ConfigError, match=r"graph\[0\]: the first stage must be 'detect'"):
        load_config(write_config(data))


def test_broken_yaml_names_line_and_column(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("sources:\n  - id: a\n    uri: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line \d+ column \d+: invalid YAML"):
        load_config(p)


def test_subset_keeps_only_the_named_cameras(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["sources"].append({"id": "b", "uri": sample_path("vtest.mp4")})
    cfg = load_config(write_config(data)).subset(["b"])
    assert [s.id for s in cfg.sources] == ["b"]
    with pytest.raises(ConfigError, match="no camera with id zz"):
        cfg.subset(["zz"])


def test_cli_validate_exits_2_and_prints_every_problem(write_config, model_path, sample_path, pipeline_cmd):
    data = base(model_path, sample_path)
    data["sources"][0]["uri"] = "missing.mp4"
    data["models"]["det"]["layout"] = "yolo9000"
    data["outputs"] = {"video": {"crf": 99}}
    r = subprocess.run([*pipeline_cmd, "validate", "--config", write_config(data)], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 2
    lines = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 3
    assert "sources[0].uri: file not found: missing.mp4" in r.stderr
    assert "models.det.layout: must be one of" in r.stderr
    assert "outputs.video.crf: must be within 0..63" in r.stderr


def test_a_cuda_graph_config_that_contradicts_itself_is_refused_on_a_machine_without_a_gpu(
        write_config, model_path, sample_path, pipeline_cmd):
    """The YAML a laptop validates is the one a GPU server runs: what contradicts a CUDA
    graph by itself is refused everywhere, each option named."""
    data = base(model_path, sample_path)
    data["models"]["det"]["engine"] = {"providers": ["cuda"], "cuda_graph": True, "io_binding": False,
                                       "mode": "async", "workers": 2}
    r = subprocess.run([*pipeline_cmd, "validate", "--config", write_config(data)], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 2, r.stderr
    for line in ("models.det.engine.io_binding: cuda_graph: true needs io_binding: true",
                 "models.det.engine.mode: cuda_graph: true needs mode: thread",
                 "models.det.engine.workers: cuda_graph: true needs workers: 1"):
        assert f"error: {line}" in r.stderr
    data["models"]["det"]["engine"] = {"providers": ["cuda"], "cuda_graph": True}
    load_config(write_config(data))  # consistent: it runs (on a CPU, without graphs)


def test_the_shipped_configs_validate():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        try:
            load_config(path)
        except ConfigError as e:
            if any("file not found" in p and ("models/" in p or "samples/" in p) for p in e.problems):
                pytest.skip("models or samples not fetched")
            raise


def test_cli_validate_checks_models_stage_options_and_videos_without_writing(tmp_path, write_config, model_path,
                                                                           sample_path, pipeline_cmd):
    bad_video = tmp_path / "broken.mp4"
    bad_video.write_bytes(b"\x00" * 4096)
    data = base(model_path, sample_path)
    data["sources"].append({"id": "b", "uri": str(bad_video)})
    data["outputs"] = {"dir": str(tmp_path / "out")}
    r = subprocess.run([*pipeline_cmd, "validate", "--config", write_config(data)], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 2
    assert f"error: sources[1].uri: cannot read video {bad_video}" in r.stderr
    assert not (tmp_path / "out").exists()  # validation writes nothing
    data["sources"].pop()
    data["graph"].insert(1, {"track": {"max_agee": 3}})
    r = subprocess.run([*pipeline_cmd, "validate", "--config", write_config(data)], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 2 and "error: graph[1].track.max_agee: unknown key" in r.stderr
    data["graph"].pop(1)
    r = subprocess.run([*pipeline_cmd, "validate", "--config", write_config(data)], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 0 and "ok (1 camera(s)" in r.stdout


def test_analytics_and_per_track_classification_need_a_tracker(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["graph"].insert(1, {"analytics": {"cameras": {}}})
    with pytest.raises(ConfigError, match=r"graph\[1\].analytics: needs a track stage before it"):
        load_config(write_config(data))


def test_problems_never_show_a_secret(write_config, model_path, sample_path):
    """Type errors on secret fields name the type alone; a URL in a problem is redacted."""
    data = base(model_path, sample_path)
    data["sources"].append("rtsp://admin:Pl4nted1@10.0.0.7/stream1")  # a camera written as its URL alone
    data["outputs"] = {"web": {"port": 0, "token": 918273645},
                       "events": {"mqtt": {"host": "127.0.0.1", "password": 564738291},
                                  "webhook": {"url": ["https://hooks.example/x?token=Pl4nted2"]}}}
    with pytest.raises(ConfigError) as e:
        load_config(write_config(data))
    problems = e.value.problems
    assert "outputs.events.mqtt.password: expected a string, got an integer" in problems
    assert "outputs.web.token: expected a string, got an integer" in problems
    assert "outputs.events.webhook.url: expected a string, got a list" in problems
    assert "sources[1]: expected a mapping, got str 'rtsp://admin:***@10.0.0.7/stream1'" in problems
    for secret in ("Pl4nted1", "Pl4nted2", "918273645", "564738291"):
        assert not [p for p in problems if secret in p]


def test_detection_rate_and_motion_mistakes_are_reported_with_their_paths(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["sources"][0]["motion"] = {"threshold": 0, "mask": [[[0, 0], [1, 1]]]}
    data["graph"][0]["detect"].update({"fps": 0, "regions": True, "cameras": {"a": {"refresh_s": -1}, "zz": {}}})
    with pytest.raises(ConfigError) as e:
        load_config(write_config(data))
    assert sorted(e.value.problems) == sorted([
        "sources[0].motion.threshold: must be within 1..255, got 0",
        "sources[0].motion.mask[0]: expected 3 or more [x, y] points",
        "graph[0].detect.fps: must be > 0, got 0.0",
        "graph[0].detect.cameras.a.refresh_s: must be > 0, got -1.0",
        "graph[0].detect.regions: regions are cut around motion: needs `motion: true`",
        "graph[0].detect.cameras.zz: no camera with this id"])


def test_a_cameras_own_detection_rate_overrides_the_stages(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["sources"].append({"id": "b", "uri": sample_path("bikes.mp4")})
    data["graph"][0]["detect"].update({"fps": 5, "motion": True, "cameras": {"b": {"fps": 2, "regions": True}}})
    detect = load_config(write_config(data)).graph[0]
    assert (detect.rate("a").fps, detect.rate("a").motion, detect.rate("a").regions) == (5, True, False)
    assert (detect.rate("b").fps, detect.rate("b").motion, detect.rate("b").regions) == (2, True, True)


def test_counts_beyond_what_the_machine_can_hold_are_refused_naming_the_limit(write_config, model_path, sample_path,
                                                                               monkeypatch):
    from pipeline.config.limits import machine
    from pipeline.preflight import check

    data = base(model_path, sample_path)
    data["sources"][0].update(thread_count=5000, queue={"size": 10**6})
    data["graph"] += [{"track": {}}, {"analytics": {"cameras": {"a": {
        "lines": [{"name": f"l{i}", "points": [[0, 0], [10, i + 1]]} for i in range(300)],
        "zones": [{"name": "z", "polygon": [[i, i % 7] for i in range(2000)]}]}}}}]
    data["outputs"] = {"events": {"clips": {"pre_s": 10**6, "post_s": 5}, "mqtt": {"host": "x", "buffer": 10**9}}}
    data["runtime"] = {"queue_size": 10**5}
    with pytest.raises(ConfigError) as e:
        load_config(write_config(data))
    cores = machine().cores
    for line in (f"sources[0].thread_count: 5000 is over the limit of {max(16, cores)} (decode threads per camera: "
                 f"the {cores} visible cores, at least 16)",
                 "sources[0].queue.size: 1e+06 is over the limit of 256 (frames waiting in one lane)",
                 "graph[3].analytics.cameras.a.lines: 300 is over the limit of 256 (lines per camera)",
                 "graph[3].analytics.cameras.a.zones[0].polygon: 2000 is over the limit of 1024 (points of a polygon)",
                 "outputs.events.clips.pre_s: 1e+06 is over the limit of 600 (seconds of a clip before its event)",
                 "outputs.events.mqtt.buffer: 1e+09 is over the limit of 1e+06 (events held in memory)",
                 "runtime.queue_size: 100000 is over the limit of 256 (frames waiting in one queue)"):
        assert line in e.value.problems, (line, e.value.problems)
    assert machine().cameras() == machine().memory // 2 // (32 * 2**20)  # each camera at least 32 MiB: here
    monkeypatch.setattr("pipeline.config.limits.CAMERA_BYTES", machine().memory // 4)  # a machine for 2 cameras
    many = base(model_path, sample_path)
    many["sources"] = [{"id": f"c{i}", "uri": "rtsp://127.0.0.1:1/x"} for i in range(3)]
    checked = check(write_config(many), for_run=False)  # what `validate` and `run` report, exit 2
    assert checked.problems == [f"sources: 3 cameras are over the limit of 2 (each holds at least "
                                f"{machine().memory // 4 // 2**20} MiB, in half of this machine's "
                                f"{machine().memory / 2**30:.1f} GiB)"]


def test_a_cameras_recording_takes_outputs_record_with_its_own_keys(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["sources"].append({"id": "b", "uri": sample_path("vtest.mp4"), "record": {"enabled": False}})
    data["sources"][0]["record"] = {"segment_s": 60}
    data["outputs"] = {"record": {"enabled": True, "filename": "rec/{camera}.{start}.mkv"}}
    cfg = load_config(write_config(data))
    a, b = (cfg.outputs.record_for(s.record) for s in cfg.sources)
    assert (a.enabled, a.segment_s, a.filename) == (True, 60.0, "rec/{camera}.{start}.mkv")
    assert (b.enabled, b.segment_s) == (False, None)


def test_recording_mistakes_are_reported_with_their_paths(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["sources"][0]["record"] = {"segment_s": 0.5, "colour": True}
    data["sources"].append({"id": "b", "uri": sample_path("vtest.mp4"), "detect_uri": "rtsp://127.0.0.1/sub"})
    data["outputs"] = {"record": {"filename": "{camera}.rec.{start}.avi"}}
    with pytest.raises(ConfigError) as e:
        load_config(write_config(data))
    problems = e.value.problems
    assert "sources[0].record.segment_s: must be 0 (off) or >= 1, got 0.5" in problems
    assert any(p.startswith("sources[0].record.colour: unknown key") for p in problems)
    assert any(p.startswith("sources[1].detect_uri: must be of the same kind as uri") for p in problems)
    assert "outputs.record.filename: the extension names the container: one of .mp4, .mov, .mkv" in problems


def test_a_sub_stream_needs_a_recording_and_recordings_share_no_name(write_config, model_path, sample_path):
    data = base(model_path, sample_path)
    data["sources"][0]["detect_uri"] = sample_path("vtest.mp4")
    data["sources"].append({"id": "b", "uri": sample_path("vtest.mp4"), "record": {"enabled": True,
                                                                                   "filename": "{camera}.mp4"}})
    data["outputs"] = {"video": {"segment_s": 60}}
    with pytest.raises(ConfigError) as e:
        load_config(write_config(data))
    problems = e.value.problems
    assert any(p.startswith("sources[0].detect_uri: the camera's uri is only recorded: enable its recording")
               for p in problems)
    assert any(p.startswith("sources[1].record.filename: camera 'b''s recording segments") and
               "is also camera 'b''s video segments" in p for p in problems)


def kept_by_motion(model_path, sample_path, detect: dict, record: dict | None = None) -> dict:
    data = base(model_path, sample_path)
    data["graph"][0]["detect"].update(detect)
    data["sources"].append({"id": "b", "uri": sample_path("vtest.mp4"), "record": record or {}})
    data["outputs"] = {"record": {"enabled": True},
                       "store": {"recordings_kept": "motion", "recordings_days": 7}}
    return data


def test_recordings_kept_by_motion_is_refused_for_a_recorded_camera_whose_motion_is_not_measured(
        write_config, model_path, sample_path):
    """Its segments all have 0 s of motion: every old one would go, objects or not."""
    with pytest.raises(ConfigError) as e:
        load_config(write_config(kept_by_motion(model_path, sample_path, {"cameras": {"a": {"motion": True}}})))
    assert e.value.problems == [
        "outputs.store.recordings_kept: motion keeps only recordings with motion, and camera 'b' (sources[1]) is "
        "recorded without its motion measured: set graph[0].detect.motion to true (for a camera of the config "
        "file, graph[0].detect.cameras.b.motion will do), or keep its recordings by `active_objects`"]
    with pytest.raises(ConfigError) as e:
        load_config(write_config(kept_by_motion(model_path, sample_path, {"motion": True,
                                                                          "cameras": {"a": {"motion": False}}})))
    assert len(e.value.problems) == 1 and "camera 'a' (sources[0]) is recorded without" in e.value.problems[0]
    load_config(write_config(kept_by_motion(model_path, sample_path, {"motion": True})))
    unrecorded = kept_by_motion(model_path, sample_path, {"cameras": {"a": {"motion": True}}}, {"enabled": False})
    load_config(write_config(unrecorded))  # a camera without recordings loses none
    active = kept_by_motion(model_path, sample_path, {})
    active["outputs"]["store"]["recordings_kept"] = "active_objects"  # every camera's objects are measured
    load_config(write_config(active))


def test_a_camera_added_while_running_is_refused_where_recordings_are_kept_by_motion_it_does_not_measure(
        write_config, model_path, sample_path):
    from pipeline.control import CameraControl

    class Runs:
        def __init__(self):
            self.started: list[str] = []

        def add_camera(self, source):
            self.started.append(source.id)

        def cameras(self):
            return list(self.started)

    config = load_config(write_config(kept_by_motion(model_path, sample_path, {"cameras": {"a": {"motion": True},
                                                                                           "b": {"motion": True}}})))
    runs = Runs()
    control = CameraControl(runs, config)
    with pytest.raises(ConfigError) as e:
        control.add({"id": "c", "uri": sample_path("bikes.mp4")}, "added")
    assert e.value.problems == [
        "outputs.store.recordings_kept: motion keeps only recordings with motion, and camera 'c' (added) is "
        "recorded without its motion measured: set graph[0].detect.motion to true (for a camera of the config "
        "file, graph[0].detect.cameras.c.motion will do), or keep its recordings by `active_objects`"]
    control.add({"id": "d", "uri": sample_path("bikes.mp4"), "record": {"enabled": False}}, "added")
    assert runs.started == ["d"]
