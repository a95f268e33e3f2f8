"""Cameras over HTTP (`outputs.web.control`) on a real socket, in front of a running
pipeline: a camera added with the token starts, one removed ends with its files
finalised; mistakes answer like `validate` (400), an id in use 409, an unknown one 404,
no token 401, control off 403, a body too large 413."""
from __future__ import annotations

import json
import time

import av
import pytest

from pipeline.config import ConfigError, load_config
from pipeline.config.outputs import WebConfig
from pipeline.control import CameraControl
from pipeline.sinks.preview import Preview
from pipeline.web.server import WebServer
from web_support import get, live_config, raw, running  # noqa: F401  (a fixture)

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def controlled(model_path, sample_path, running):
    """One camera (campus) running, and a web server that adds and removes cameras for it."""
    cfg = live_config(model_path, sample_path)
    cfg["sources"] = cfg["sources"][:1]
    del cfg["outputs"]["web"]
    p = running(cfg)
    preview = Preview()
    server = WebServer(WebConfig(port=0, token=TOKEN, control=True), p.snapshot, preview, cameras=p.cameras,
                       control=CameraControl(p, p.config))
    server.start()
    yield p, f"http://127.0.0.1:{server.port}"
    server.close()
    preview.close()


def post(base: str, body: bytes, headers: dict | None = None, content_type: str = "application/yaml"):
    return get(base + "/api/cameras", {**AUTH, "Content-Type": content_type, **(headers or {})}, "POST", body)


def until(condition, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_a_camera_added_and_removed_over_http(controlled, sample_path):
    p, base = controlled
    body = json.dumps({"id": "dock", "uri": sample_path("bikes.mp4"), "realtime": True, "loop": True}).encode()
    status, answer, _ = post(base, body, content_type="application/json")
    assert (status, json.loads(answer)) == (201, {"added": "dock"})
    assert "dock" in p.cameras()
    assert until(lambda: "dock" in json.loads(get(base + "/api/cameras", AUTH)[1])["cameras"])
    assert until(lambda: p.snapshot().cameras["dock"].processed > 0)
    status, answer, _ = get(base + "/api/cameras/dock", AUTH, "DELETE")
    assert (status, json.loads(answer)) == (202, {"removing": "dock"})
    assert until(lambda: "dock" not in p.cameras())
    assert "campus" in p.cameras()  # the other camera goes on


def test_mistakes_answer_400_with_the_lines_validate_gives(controlled, sample_path, write_config, model_path):
    p, base = controlled
    bad = {"id": "dock", "uri": "/nope/x.mp4", "fps": 3, "loop": "maybe"}
    status, answer, _ = post(base, json.dumps(bad).encode(), content_type="application/json")
    cfg = live_config(model_path, sample_path)
    cfg["sources"] = [bad]
    with pytest.raises(ConfigError) as validated:
        load_config(write_config(cfg, "bad.yaml"))
    expected = [line.replace("sources[0]", "body") for line in validated.value.problems
                if line.startswith("sources[0]")]
    assert status == 400 and len(expected) == 3
    assert answer.decode().splitlines() == expected
    assert post(base, b"id: dock\nuri: [unclosed\n")[:2] == (
        400, b"body: line 3 column 1: invalid YAML: expected ',' or ']', but got '<stream end>'\n")
    status, answer, _ = post(base, b'{"id": "dock",', content_type="application/json")
    assert status == 400 and answer.startswith(b"body: invalid JSON: ") and answer.count(b"\n") == 1
    assert post(base, b"\xff\xfe")[:2] == (400, b"body: not UTF-8 text\n")
    assert post(base, b"- id: dock\n")[:2] == (400, b"body: expected a mapping with id and uri, got list\n")
    for content_type in ("application/yaml", "application/json"):  # a number Python will not read
        status, answer, _ = post(base, b'{"id": "dock", "uri": "x", "stride": ' + b"9" * 60000 + b"}",
                                 content_type=content_type)
        assert status == 400 and answer.startswith(b"body: ") and answer.count(b"\n") == 1, answer[:200]
    assert "dock" not in p.cameras()


def test_a_body_that_expands_or_nests_without_end_is_400(controlled):
    """500 bytes of nested YAML aliases stand for 10^9 values: the answer took for ever."""
    _, base = controlled
    bomb = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    bomb += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    body = ("\n".join(bomb) + "\nid: dock\nuri: x.mp4\nloop: *a8\n").encode()
    assert post(base, body)[:2] == (400, b"body: line 2 column 10: YAML aliases (*name) are not accepted here\n")
    deep = b"[" * 60000
    assert post(base, deep, content_type="application/json")[:2] == (
        400, b"body: nested too deeply (at most 32 levels)\n")


def test_yaml_nested_beyond_32_levels_is_400_before_it_is_parsed(controlled):
    """60 KB of brackets as YAML held a handler thread for 3 minutes (57 s of CPU): PyYAML's
    cost grows with the square of the nesting. The answer now comes within `get`'s 10 s."""
    _, base = controlled
    assert post(base, b"[" * 30000 + b"]" * 30000)[:2] == (
        400, b"body: line 1 column 33: nested too deeply (at most 32 levels)\n")
    block = "".join(" " * i + "a:\n" for i in range(33)).encode()
    assert post(base, block)[:2] == (400, b"body: line 33 column 33: nested too deeply (at most 32 levels)\n")
    nested: list = []
    for _ in range(31):  # in `options` in the mapping: 33 levels
        nested = [nested]
    deep_json = json.dumps({"id": "dock", "uri": "x.mp4", "options": {"a": nested}}).encode()
    assert post(base, deep_json, content_type="application/json")[:2] == (
        400, b"body: nested too deeply (at most 32 levels)\n")


def test_a_fifo_is_400_and_never_becomes_a_camera(controlled, fifo):
    """A `file://` FIFO was answered 201 and its camera kept the run alive 10 minutes past SIGTERM."""
    p, base = controlled
    pipe = fifo()
    status, answer, _ = post(base, json.dumps({"id": "dock", "uri": f"file://{pipe}"}).encode(),
                             content_type="application/json")
    assert (status, answer) == (400, f"body.uri: not a regular file (a FIFO): file://{pipe}\n".encode())
    assert p.cameras() == ["campus"]


def test_answers_are_redacted(controlled):
    _, base = controlled
    status, answer, _ = post(base, b"id: dock\nuri: /nope/x.mp4?token=hunter2\n")
    assert status == 400 and answer == b"body.uri: file not found: /nope/x.mp4?token=***\n"


def test_an_id_in_use_is_409_an_unknown_one_404(controlled, sample_path):
    p, base = controlled
    status, answer, _ = post(base, f"id: campus\nuri: {sample_path('bikes.mp4')}\n".encode())
    assert (status, answer) == (409, b"body.id: camera campus is already running\n")
    status, answer, _ = get(base + "/api/cameras/nope", AUTH, "DELETE")
    assert (status, answer) == (404, b"camera nope is not running\n")
    assert get(base + "/api/cameras/", AUTH, "DELETE")[0] == 404
    assert p.cameras() == ["campus"]


@pytest.mark.parametrize("first, second, why", [
    ({"id": "x", "record": {"enabled": True, "segment_s": 1}}, {"id": "x.rec"}, "one would destroy the other"),
    ({"id": "d.part1"}, {"id": "d"}, "has the name of a later segment of camera 'd'"),
], ids=["x-then-x.rec", "d.part1-then-d"])
def test_a_camera_whose_files_are_those_of_one_added_before_is_400_as_validate_says(controlled, sample_path,
                                                                                      first, second, why):
    """Checked against the cameras added before it as against the configured ones: both
    would write the same files (x's recording segments are x.rec's video segments; d's
    video after a resolution change is d.part1's), one destroying the other."""
    p, base = controlled
    clip = {"uri": sample_path("bikes.mp4"), "realtime": True, "loop": True}
    assert post(base, json.dumps({**clip, **first}).encode(), content_type="application/json")[0] == 201
    status, answer, _ = post(base, json.dumps({**clip, **second}).encode(), content_type="application/json")
    assert status == 400 and why in answer.decode() and len(answer.decode().splitlines()) == 1
    assert p.cameras() == ["campus", first["id"]]


def test_no_token_or_a_wrong_one_is_401_and_changes_nothing(controlled, sample_path):
    p, base = controlled
    body = f"id: dock\nuri: {sample_path('bikes.mp4')}\n".encode()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": "pipeline_token=wrong"}):
        status, _, _ = get(base + "/api/cameras", {"Content-Type": "application/yaml", **headers}, "POST", body)
        assert status == 401, headers
        assert get(base + "/api/cameras/campus", headers, "DELETE")[0] == 401, headers
    assert get(base + f"/api/cameras?token={TOKEN}", {}, "POST", body)[0] == 201  # the token's other place
    assert p.cameras() == ["campus", "dock"]


def test_a_body_too_large_is_413_and_one_without_a_length_411(controlled):
    p, base = controlled
    big = b"id: dock\nuri: x\n# " + b"x" * (64 * 1024) + b"\n"
    status, answer, _ = post(base, big)
    assert status == 413 and answer == b"a camera's mapping is at most 65536 bytes\n"
    port = int(base.rsplit(":", 1)[1])
    chunked = (b"POST /api/cameras HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
               b"\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nid: d\r\n0\r\n\r\n")
    assert raw(port, chunked).startswith(b"HTTP/1.1 411")
    assert p.cameras() == ["campus"]


def test_control_off_is_403(model_path, sample_path, running):
    """The path exists (GET lists the cameras): changing the cameras is what is refused."""
    p = running(live_config(model_path, sample_path))
    base = f"http://127.0.0.1:{p.side.web.port}"
    status, answer, _ = get(base + "/api/cameras", {"Content-Type": "application/yaml"}, "POST", b"id: x\nuri: y\n")
    assert (status, answer) == (403, b"adding and removing cameras over HTTP is off (outputs.web.control)\n")
    assert get(base + "/api/cameras/campus", {}, "DELETE")[0] == 403
    assert sorted(p.cameras()) == ["campus", "street"]


def test_control_without_a_token_is_refused_when_the_config_is_read(model_path, sample_path, write_config):
    cfg = live_config(model_path, sample_path, control=True)
    with pytest.raises(ConfigError) as e:
        load_config(write_config(cfg))
    assert e.value.problems == ["outputs.web.control: adding and removing cameras over HTTP needs outputs.web.token"]
    cfg["outputs"]["web"]["token"] = TOKEN
    assert load_config(write_config(cfg)).outputs.web.control


def test_a_server_given_control_without_a_token_does_not_start(model_path, sample_path, running):
    """A WebConfig made in code never went through the config's check."""
    from pipeline.errors import StartupError

    cfg = live_config(model_path, sample_path)
    del cfg["outputs"]["web"]
    p = running(cfg)
    preview = Preview()
    try:
        with pytest.raises(StartupError, match="^outputs.web.control: .* needs outputs.web.token$"):
            WebServer(WebConfig(port=0, control=True), p.snapshot, preview, control=CameraControl(p, p.config))
    finally:
        preview.close()


def decoded_frames(path: str) -> int:
    with av.open(path) as f:
        return sum(1 for _ in f.decode(video=0))


def test_a_running_pipeline_adds_and_removes_cameras_on_its_own_port(model_path, sample_path, running, tmp_path):
    """The graph's web server with `outputs.web.control`: the camera's tile data and outputs
    appear; removed, its MP4 is finalised and plays."""
    cfg = live_config(model_path, sample_path, token=TOKEN, control=True)
    cfg["sources"] = cfg["sources"][:1]
    p = running(cfg)
    base = f"http://127.0.0.1:{p.side.web.port}"
    body = f"id: dock\nuri: {sample_path('bikes.mp4')}\nrealtime: true\nloop: true\n".encode()
    assert post(base, body, {"Authorization": "Bearer wrong"})[0] == 401
    status, answer, _ = post(base, body)
    assert (status, answer) == (201, b'{"added": "dock"}')
    assert post(base, body)[0] == 409
    assert post(base, b"id: dock2\n")[:2] == (400, b"body.uri: required\n")
    assert until(lambda: json.loads(get(base + "/api/cameras", AUTH)[1])["cameras"].get("dock", {})
                 .get("processed", 0) >= 10)
    assert get(base + "/frame/dock.jpg", AUTH)[0] == 200  # its tile's picture
    video = tmp_path / "out" / "dock.mp4"
    assert until(lambda: (tmp_path / "out" / "detections.jsonl").exists() and video.exists())
    assert get(base + "/api/cameras/dock", AUTH, "DELETE")[0] == 202
    assert until(lambda: "dock" not in p.cameras())

    def playable() -> bool:
        try:
            return decoded_frames(str(video)) >= 10
        except av.FFmpegError:
            return False
    assert until(playable)  # the moov box was written: the file is finalised
    lines = [json.loads(x) for x in (tmp_path / "out" / "detections.jsonl").read_text().splitlines()]
    assert any(line["camera"] == "dock" for line in lines)
    assert "campus" in p.cameras()


def test_parallel_adds_of_one_id_start_it_once_and_the_others_hear_409(controlled, short_clips, monkeypatch):
    """Three requests add one id at the same moment, four times over: one 201 each time,
    the others 409 (never a second camera of that id, never 400), and every frame of the
    camera counted once. Opening a camera's outputs is made slow, as on a busy disk: the
    time between a request's check and its camera's start is where a second one got in."""
    import threading

    p, base = controlled
    opening = p.sink.add_camera

    def slow_open(*args, **kwargs):
        time.sleep(0.3)
        return opening(*args, **kwargs)

    monkeypatch.setattr(p.sink, "add_camera", slow_open)
    for round_ in range(4):
        body = json.dumps({"id": f"dup{round_}", "uri": short_clips["bikes"]}).encode()
        answers: list[int] = []
        gate = threading.Barrier(3)

        def add() -> None:
            gate.wait()
            answers.append(post(base, body, content_type="application/json")[0])

        threads = [threading.Thread(target=add) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(answers) == [201, 409, 409], (round_, answers)
    assert until(lambda: not any(c.startswith("dup") for c in p.cameras()))
    for round_ in range(4):
        cam = p.snapshot().cameras[f"dup{round_}"]
        assert cam.frames_in == cam.processed + cam.dropped_total == 40, cam


def test_cameras_come_and_go_while_the_api_is_read_and_every_read_is_answered(controlled, short_clips, tmp_path):
    """Cameras added and removed over HTTP while `/api/cameras` is polled: every poll gets
    a whole answer, the run goes on, and every camera's frames add up."""
    import threading

    from conftest import cut_clip

    p, base = controlled
    clip = cut_clip(short_clips["bikes"], str(tmp_path / "ten.mp4"), 10)
    stop, reads, failures = threading.Event(), [], []

    def poll() -> None:
        while not stop.is_set():
            try:
                status, body, _ = get(base + "/api/cameras", AUTH)
                reads.append((status, sorted(json.loads(body)["cameras"])))
            except Exception as e:  # a closed connection, a torn body
                failures.append(e)

    readers = [threading.Thread(target=poll) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for i in range(12):
            body = json.dumps({"id": f"x{i}", "uri": clip}).encode()
            assert post(base, body, content_type="application/json")[0] == 201
            if i % 3 == 2:
                assert get(base + f"/api/cameras/x{i - 1}", AUTH, "DELETE")[0] in (202, 404)  # 404: it ended
        assert until(lambda: not any(c.startswith("x") for c in p.cameras()), 120)
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert not failures and len(reads) > 10 and all(status == 200 for status, _ in reads), failures[:1]
    assert "campus" in p.cameras()  # the base camera went on
    for i in range(12):
        cam = p.snapshot().cameras[f"x{i}"]
        assert cam.state == "ended" and cam.frames_in == cam.processed + cam.dropped_total, (i, cam)


def test_counts_no_machine_can_hold_are_400_naming_the_limit(controlled, sample_path, monkeypatch):
    """100,000 decode threads over HTTP once froze every camera; a camera more than the
    memory holds is refused too, and nothing starts."""
    import threading

    from pipeline.config.limits import machine

    p, base = controlled
    threads = threading.active_count()
    body = {"id": "dock", "uri": sample_path("bikes.mp4"), "thread_count": 100000}
    status, answer, _ = post(base, json.dumps(body).encode(), content_type="application/json")
    assert status == 400 and answer.decode() == (f"body.thread_count: 100000 is over the limit of "
                                                 f"{max(16, machine().cores)} (decode threads per camera: the "
                                                 f"{machine().cores} visible cores, at least 16)\n")
    monkeypatch.setattr("pipeline.config.limits.CAMERA_BYTES", machine().memory // 2)  # room for one camera
    status, answer, _ = post(base, json.dumps({"id": "dock", "uri": sample_path("bikes.mp4")}).encode(),
                             content_type="application/json")
    assert status == 400 and answer.decode().startswith("camera dock cannot be added: 2 cameras are over the limit "
                                                        "of 1 (each holds at least"), answer
    assert p.cameras() == ["campus"] and "dock" not in p.snapshot().cameras
    assert threading.active_count() < threads + 8  # no decoder of 100,000 threads was ever made
