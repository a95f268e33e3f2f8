"""Everything `run` refuses is found before a camera starts, in one round, with its YAML
path: config mistakes of every kind, models, output names and folders, encoders."""
from __future__ import annotations

import os
import subprocess
import sys

import yaml

from conftest import ROOT, classifier_model, detector_model
from pipeline.preflight import check


def base(model_path, sample_path, **outputs) -> dict:
    return {"sources": [{"id": "a", "uri": sample_path("bikes.mp4")}],
            "models": {"det": detector_model(model_path)},
            "graph": [{"detect": {"model": "det"}}, "annotate"], "outputs": outputs}


def problems_of(data: dict, tmp_path, for_run: bool = False, **overrides) -> list[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    checked = check(str(path), for_run=for_run, **overrides)
    return checked.problems


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def test_a_mistake_of_every_kind_is_reported_in_one_round_and_nothing_starts(tmp_path, model_path, sample_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model at all")
    data = {"sources": [{"id": "a", "uri": sample_path("bikes.mp4"), "stride": "two"}],
            "models": {"det": detector_model(model_path),
                       "cls": classifier_model(model_path, labels=str(ROOT / "models" / "coco_classes.txt")),
                       "broken": classifier_model(model_path, path=str(garbage))},
            "graph": [{"detect": {"model": "det"}},
                      {"track": {"max_agee": 3}},
                      {"classify": {"model": "cls"}},
                      {"classify": {"model": "broken"}},
                      {"detect": {"model": "det"}},
                      {"analytics": {"cameras": {"a": {"lines": [{"name": "l", "points": [[0, 0]]}]},
                                                 "ghost": {}}}}],
            "outputs": {"dir": str(tmp_path / "out")}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    r = cli("run", "--config", str(tmp_path / "config.yaml"))
    assert r.returncode == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    expected = ["sources[0].stride: expected an integer, got str 'two'",                    # YAML types
                "graph[1].track.max_agee: unknown key",                                       # stage options
                "graph[5].analytics.cameras.a.lines[0].points: expected 2 [x, y] points",     # geometry
                "graph[5].analytics.cameras.ghost: no camera with this id",                   # analytics camera
                "graph[4].detect: only the first stage may be a detect stage",                # second detect
                "models.broken: cannot load",                                                 # unreadable model
                "models.cls.labels: the model has 1000 classes but labels lists 80"]          # label count
    for want in expected:
        assert any(want in e for e in errors), (want, errors)
    assert len(errors) == len(expected), errors
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


def test_camera_ids_are_names_not_paths(tmp_path, model_path, sample_path):
    data = base(model_path, sample_path, dir=str(tmp_path / "out"))
    data["sources"] = [{"id": i, "uri": sample_path("bikes.mp4")} for i in ("../x", "/abs/x", "", ".hidden", "ok-1.b_2")]
    problems = problems_of(data, tmp_path)
    for i in range(3):
        assert any(p.startswith(f"sources[{i}].id:") for p in problems), problems
    assert any(p.startswith("sources[3].id:") and "not starting with '.'" in p for p in problems)
    assert not any(p.startswith("sources[4]") for p in problems)


def test_outputs_that_would_destroy_each_other_or_an_input_are_refused(tmp_path, model_path, sample_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    clip = clips / "gate.mp4"
    clip.write_bytes(open(sample_path("bikes.mp4"), "rb").read())
    # the JSON lines file named like a camera's video
    data = base(model_path, sample_path, dir=str(tmp_path / "out"), jsonl={"filename": "a.mp4"})
    assert any(p.startswith("outputs.jsonl.filename:") and "one would destroy the other" in p
               for p in problems_of(data, tmp_path))
    # outputs written next to the inputs, a camera named like its input file: the input would be overwritten
    data = base(model_path, sample_path, dir=str(clips))
    data["sources"] = [{"id": "gate", "uri": str(clip)}]
    assert any(p.startswith("sources[0].uri:") and "would be overwritten" in p for p in problems_of(data, tmp_path))
    # camera 'cam.part1' is the name of camera 'cam''s second segment after a resolution change
    data = base(model_path, sample_path, dir=str(tmp_path / "out"))
    data["sources"] = [{"id": "cam", "uri": sample_path("bikes.mp4")}, {"id": "cam.part1", "uri": sample_path("bikes.mp4")}]
    assert any("later segment of camera 'cam'" in p for p in problems_of(data, tmp_path))


def test_bad_output_templates_and_encoder_settings_are_refused(tmp_path, model_path, sample_path):
    cases = {"filename": ("{camera}_{date}.mp4", "unknown placeholder {date}"),
             "preset": ("superduperfast", "cannot open the encoder"),
             "options": ({"crf": "abc"}, "cannot open the encoder")}
    for key, (value, message) in cases.items():
        data = base(model_path, sample_path, dir=str(tmp_path / "out"), video={key: value})
        problems = problems_of(data, tmp_path)
        assert any(p.startswith("outputs.video") and message in p for p in problems), (key, problems)
    data = base(model_path, sample_path, dir=str(tmp_path / "out"), video={"filename": "{camera}"})
    assert any("needs a file extension" in p for p in problems_of(data, tmp_path))
    data = base(model_path, sample_path, dir=str(tmp_path / "out"), jsonl={"filename": "{cam}.jsonl"})
    assert any(p.startswith("outputs.jsonl.filename: unknown placeholder {cam}") for p in problems_of(data, tmp_path))


def test_output_folders_that_cannot_be_used_are_refused(tmp_path, model_path, sample_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    data = base(model_path, sample_path, dir=str(a_file / "sub"))
    assert any(p.startswith("outputs.dir: cannot create") for p in problems_of(data, tmp_path))
    data = base(model_path, sample_path, dir=str(tmp_path / "out"))
    assert any(p.startswith("outputs.dir:") and "is a file" in p
               for p in problems_of(data, tmp_path, output_dir=str(a_file)))  # --output pointing at a file
    assert any(p.startswith("metrics.report:") and "is a folder" in p
               for p in problems_of(data, tmp_path, report=str(tmp_path)))  # --report pointing at a folder
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        data = base(model_path, sample_path, dir=str(locked / "out"))
        assert any("no permission" in p for p in problems_of(data, tmp_path))


def test_a_busy_metrics_port_is_refused_by_validate_and_run(tmp_path, model_path, sample_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        data = base(model_path, sample_path, dir=str(tmp_path / "out"))
        data["metrics"] = {"prometheus_port": port}
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
        r = cli("validate", "--config", str(tmp_path / "config.yaml"))
        assert r.returncode == 2 and f"metrics.prometheus_port: port {port} on 127.0.0.1 is already in use" in r.stderr
        r = cli("run", "--config", str(tmp_path / "config.yaml"))
        assert r.returncode == 2 and f"metrics.prometheus_port: port {port} on 127.0.0.1 is already in use" in r.stderr
        assert "Traceback" not in r.stderr


def test_command_line_mistakes_are_one_line_each(tmp_path, model_path, sample_path):
    data = base(model_path, sample_path, dir=str(tmp_path / "out"))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    r = cli("run", "--config", str(tmp_path / "config.yaml"), "--max-frames", "-3")
    assert r.returncode == 2 and r.stderr.strip() == "error: --max-frames: must be >= 1, got -3"
    r = cli("run", "--config", str(tmp_path / "config.yaml"), "--cameras", "nope")
    assert r.returncode == 2 and "error: --cameras: no camera with id nope" in r.stderr
    assert not (tmp_path / "out").exists()


def test_selecting_cameras_drops_the_other_cameras_analytics(tmp_path, sample_path, model_path):
    """`--cameras street` on the sample tracking config: campus's lines and zones go with campus."""
    r = cli("run", "--config", str(ROOT / "configs" / "tracking.yaml"), "--cameras", "street", "--max-frames", "3",
            "--output", str(tmp_path / "out"), "-q")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".config", ".store_runs", ".written",
                                                                    "detections.jsonl", "store.db", "store.db.lock",
                                                                    "street.mp4"]


def test_the_shipped_configs_pass_every_check(tmp_path):
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        checked = check(str(path), output_dir=str(tmp_path / path.stem), for_run=False)
        assert checked.problems == [], (path.name, checked.problems)


def test_more_cameras_than_the_machine_holds_are_refused_without_checking_each(tmp_path, model_path, sample_path,
                                                                              monkeypatch):
    """100,000 cameras took hours in `validate`: every camera's file names against every
    other's, and a probe of each one's uri. Over the limit, the limit is the answer."""
    from pipeline.config.limits import machine

    monkeypatch.setattr("pipeline.config.limits.CAMERA_BYTES", machine().memory // 4)  # a machine for 2 cameras
    (tmp_path / "text.mp4").write_text("not a video: only a probe finds out")
    data = base(model_path, sample_path)
    data["sources"] = [{"id": f"c{i}", "uri": str(tmp_path / "text.mp4")} for i in range(3)]
    problems = problems_of(data, tmp_path)
    assert len(problems) == 1 and problems[0].startswith("sources: 3 cameras are over the limit of 2"), problems


def test_without_outputs_dir_the_output_goes_beside_the_config_wherever_the_run_starts(tmp_path, model_path,
                                                                                      sample_path):
    """The reference says `out`, relative to the config: not the working directory, where
    a config run from the repository root wrote into `make run`'s `out/`."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "elsewhere").mkdir()
    data = base(model_path, sample_path)
    del data["outputs"]
    (tmp_path / "conf" / "c.yaml").write_text(yaml.safe_dump(data))
    r = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(tmp_path / "conf" / "c.yaml"),
                        "--max-frames", "2", "-q"], capture_output=True, text=True, cwd=tmp_path / "elsewhere",
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "conf" / "out"
    assert (out / "a.mp4").is_file() and (out / "detections.jsonl").is_file()
    assert os.listdir(tmp_path / "elsewhere") == []
    checked = check(str(tmp_path / "conf" / "c.yaml"), for_run=False)
    assert checked.config.outputs.dir == str(out)


def test_a_run_never_writes_into_the_output_folder_of_another_config(tmp_path, model_path, sample_path):
    """Two configs that name one folder (or share the default `out` beside them): the second
    run is refused in one line naming the first config, its files untouched; the same config
    runs there again, and `--output` gives the other one its own folder."""
    data = base(model_path, sample_path)
    del data["outputs"]
    for name in ("first.yaml", "second.yaml"):
        (tmp_path / name).write_text(yaml.safe_dump(data))
    run = lambda name, *extra: cli("run", "--config", str(tmp_path / name), "--max-frames", "2", "-q", *extra)  # noqa: E731
    assert run("first.yaml").returncode == 0
    written = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()}
    r = cli("validate", "--config", str(tmp_path / "second.yaml"))
    assert r.returncode == 2 and str(tmp_path / "first.yaml") in r.stderr, r.stderr
    r = run("second.yaml")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: outputs.dir: {tmp_path / 'out'} holds the output of {tmp_path / 'first.yaml'}")
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()} == written
    assert run("first.yaml").returncode == 0
    assert run("second.yaml", "--output", str(tmp_path / "second-out")).returncode == 0


def test_a_cluster_run_writes_a_shared_json_lines_name_as_one_file_per_camera(tmp_path):
    """The README's `pipeline run --config configs/cameras.yaml --cluster auto` was refused:
    its one `detections.jsonl` cannot be shared by hosts. The cluster run puts the camera
    in the name instead; a name with `{camera}` stays as it is."""
    from pipeline.cluster.checks import check_for_cluster

    checked = check_for_cluster(str(ROOT / "configs" / "cameras.yaml"), str(tmp_path / "out"), None, None)
    assert checked.problems == []
    out = checked.config.outputs
    assert out.jsonl.filename == "detections.{camera}.jsonl" and out.video.fragmented
    assert out.jsonl_path("campus") == str(tmp_path / "out" / "detections.campus.jsonl")
    data = yaml.safe_load((ROOT / "configs" / "cameras.yaml").read_text())
    data["outputs"]["jsonl"]["filename"] = "{camera}-{start}.jsonl"
    data["outputs"]["dir"] = str(tmp_path / "own")
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(data).replace("../", f"{ROOT}/"))
    checked = check_for_cluster(str(tmp_path / "own.yaml"), None, None, None)
    assert checked.problems == [] and checked.config.outputs.jsonl.filename == "{camera}-{start}.jsonl"


def test_an_event_destination_whose_host_does_not_resolve_is_refused_naming_its_path(tmp_path, model_path,
                                                                                     sample_path):
    """The README's events recipe named `broker.local`: it validated, then the run lost
    every event. A name that does not resolve is a typo; a host that resolves but is down
    is fine (events wait for it, as a camera that is down is waited for)."""
    events = {"mqtt": {"host": "broker.invalid"}, "webhook": {"url": "https://hooks.invalid:8443/cameras"}}
    data = base(model_path, sample_path, dir=str(tmp_path / "out"), events=events)
    problems = problems_of(data, tmp_path)
    assert [p for p in problems if "resolve" in p] == [
        "outputs.events.mqtt.host: broker.invalid does not resolve to an address (a typo?)",
        "outputs.events.webhook.url: the host hooks.invalid does not resolve to an address (a typo?)"], problems
    events = {"mqtt": {"host": "localhost", "port": 9}, "webhook": {"url": "http://127.0.0.1:9/x"}}
    assert problems_of(base(model_path, sample_path, dir=str(tmp_path / "out"), events=events), tmp_path) == []
