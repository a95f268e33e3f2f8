"""The recordings on the page's server: a camera's segments, a segment's file (the
evidence's rules: the token, recordings only, inside `outputs.dir`, byte ranges) and the
boxes of the JSON lines rows that point into it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.config.outputs import WebConfig
from pipeline.metrics.snapshot import Snapshot
from pipeline.sinks.preview import Preview
from pipeline.web.recordings import RecordingFiles, name_pattern
from pipeline.web.server import WebServer
from synthetic import Mover, render
from web_support import get, raw

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FIRST, SECOND = "door.rec.20261201T120000Z.mp4", "door.rec.20261201T120010Z.mp4"


def row(camera: str, seq: int, recording: str | None, t: float | None) -> str:
    return json.dumps({"camera": camera, "seq": seq, "pts": seq, "time": seq / 10, "recording": recording,
                       "recording_time": t, "detections": [{"box": [seq, 2.0, seq + 10.0, 20.0], "score": 0.9,
                                                            "class_id": 0, "class": "person", "track": 1}]})


@pytest.fixture
def out(tmp_path) -> Path:
    """Two recording segments of `door` and their JSON lines, cut at 12:00:10 (its first
    rows before the keyframe still point into the first segment), the annotated video,
    another camera's rows, and files the server must never hand out."""
    out = tmp_path / "out"
    out.mkdir()
    for name in (FIRST, SECOND):
        render([Mover(np.full((40, 40, 3), 200, np.uint8), (0, 0), (100, 60))], str(out / name), frames=20,
               size=(160, 120), fps=10)
    (out / "door.mp4").write_bytes((out / FIRST).read_bytes())  # the annotated video: no recording
    (out / "door.rec.badstamp.mp4").write_bytes(b"x")
    (tmp_path / "outside.rec.20261201T120000Z.mp4").write_bytes(b"secret")
    (out / "link.rec.20261201T120000Z.mp4").symlink_to(tmp_path / "outside.rec.20261201T120000Z.mp4")
    (out / "door.20261201T120000Z.jsonl").write_text(
        "\n".join([row("door", i, FIRST, i / 10) for i in range(100)] + [row("yard", 0, None, None)]) + "\n")
    (out / "door.20261201T120010Z.jsonl").write_text(
        "\n".join([row("door", 100, FIRST, 10.0), row("door", 101, None, None)]
                  + [row("door", 102 + i, SECOND, i / 10) for i in range(20)]) + "\n")
    return out


@pytest.fixture
def base(out):
    preview = Preview()
    files = RecordingFiles(str(out), lambda: ["{camera}.rec.{start}.mp4"], "{camera}.jsonl")
    server = WebServer(WebConfig(port=0, token=TOKEN), Snapshot, preview, recordings=files)
    server.start()
    yield f"http://127.0.0.1:{server.port}"
    server.close()
    preview.close()


def test_recording_names_are_what_the_templates_give():
    pattern = name_pattern("{camera}.rec.{start}.mp4")
    assert pattern.fullmatch("cam.1.rec.20261201T120000Z.mp4").group("camera") == "cam.1"
    assert not pattern.fullmatch("cam.rec.2026.mp4") and not pattern.fullmatch("../cam.rec.20261201T120000Z.mp4")
    assert name_pattern("rec/{camera}.mkv").fullmatch("rec/door.20261201T120000Z.mkv")  # {start} before the extension


def test_a_cameras_segments_are_listed_oldest_first(base, out):
    status, body, _ = get(base + "/api/recordings/door", AUTH)
    assert status == 200
    assert json.loads(body)["segments"] == [
        {"file": FIRST, "start": "20261201T120000Z", "bytes": (out / FIRST).stat().st_size},
        {"file": SECOND, "start": "20261201T120010Z", "bytes": (out / SECOND).stat().st_size}]
    assert json.loads(get(base + "/api/recordings/yard", AUTH)[1])["segments"] == []
    assert get(base + "/api/recordings/..%2Fetc", AUTH)[0] == 404
    assert get(base + "/api/recordings/door")[0] == 401


def test_a_recording_is_served_in_byte_ranges_and_nothing_else_is(base, out, tmp_path):
    whole = (out / FIRST).read_bytes()
    status, body, headers = get(f"{base}/recordings/{FIRST}", AUTH)
    assert (status, body, headers["Content-Type"], headers["Accept-Ranges"]) == (200, whole, "video/mp4", "bytes")
    status, body, headers = get(f"{base}/recordings/{FIRST}", {**AUTH, "Range": "bytes=10-19"})
    assert (status, body, headers["Content-Range"]) == (206, whole[10:20], f"bytes 10-19/{len(whole)}")
    assert get(f"{base}/recordings/{FIRST}")[0] == 401
    port = int(base.rsplit(":", 1)[1])

    def status_of(path: str) -> int:  # the path exactly as sent
        head = raw(port, f"GET /recordings/{path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                         "Connection: close\r\n\r\n".encode())
        return int(head.split(b" ", 2)[1])

    refused = ["door.mp4", "door.rec.badstamp.mp4", "link.rec.20261201T120000Z.mp4", "door.20261201T120000Z.jsonl",
               "../outside.rec.20261201T120000Z.mp4", "%2e%2e/outside.rec.20261201T120000Z.mp4",
               str(tmp_path / "outside.rec.20261201T120000Z.mp4"), "door.rec.20261201T130000Z.mp4",
               "./" + FIRST, "door.rec.20261201T120000Z.mp4%00"]
    assert {p: status_of(p) for p in refused} == {p: 404 for p in refused}


def test_the_boxes_of_a_recording_are_the_rows_that_point_into_it_by_their_time_in_it(base):
    def frames(query: str) -> list[dict]:
        status, body, _ = get(f"{base}/api/boxes?{query}", AUTH)
        assert status == 200
        return json.loads(body)["frames"]

    first = frames(f"recording={FIRST}")
    assert [f["seq"] for f in first] == list(range(101))  # its rows in both JSON lines files, none of yard's
    assert first[5] == {"t": 0.5, "seq": 5, "detections": [{"box": [5, 2.0, 15.0, 20.0], "score": 0.9, "class_id": 0,
                                                           "class": "person", "track": 1}]}
    assert [f["t"] for f in frames(f"recording={SECOND}&from=0.5&to=0.8")] == [0.5, 0.6, 0.7, 0.8]
    assert get(f"{base}/api/boxes?recording=door.mp4", AUTH)[0] == 404
    assert get(f"{base}/api/boxes?recording={FIRST}")[0] == 401


def test_a_range_header_that_is_no_valid_byte_range_is_ignored_and_the_file_sent_whole(base, out):
    """RFC 9110: a server may ignore a Range it cannot read; 416 is for a range beyond the file."""
    whole = (out / FIRST).read_bytes()
    for header in ("bytes=abc", "bytes=20-10", "items=0-5", "bytes", "bytes=--5", "bytes=0-1,5-9"):
        assert get(f"{base}/recordings/{FIRST}", {**AUTH, "Range": header})[:2] == (200, whole), header
    status, _, headers = get(f"{base}/recordings/{FIRST}", {**AUTH, "Range": f"bytes={len(whole)}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{len(whole)}"


def test_a_recording_being_written_is_served_up_to_its_last_whole_box_in_byte_ranges_too(base, out):
    """Its torn tail (a fragment half written) is never sent: the answer, its ranges and
    its 416 all count the file as ending where it plays now."""
    whole = (out / FIRST).read_bytes()
    growing = "door.rec.20261201T120020Z.mp4"
    (out / growing).write_bytes(whole + b"\x00\x00\x40\x00moof" + b"\x00" * 100)  # a fragment's index, torn
    assert get(f"{base}/recordings/{growing}", AUTH)[:2] == (200, whole)
    status, body, headers = get(f"{base}/recordings/{growing}", {**AUTH, "Range": "bytes=-10"})
    assert (status, body, headers["Content-Range"]) == (206, whole[-10:], f"bytes {len(whole) - 10}-{len(whole) - 1}"
                                                                          f"/{len(whole)}")
    status, _, headers = get(f"{base}/recordings/{growing}", {**AUTH, "Range": f"bytes={len(whole)}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{len(whole)}"


def test_the_boxes_of_a_recording_that_is_not_there_are_404(base, out):
    """Named as a recording is, but no such file (never written, or removed by retention)."""
    for name in ("door.rec.20261201T130000Z.mp4", "yard.rec.20261201T120000Z.mp4"):
        assert get(f"{base}/api/boxes?recording={name}", AUTH)[:2] == (404, b"no such recording\n"), name
    assert get(f"{base}/api/boxes?recording={FIRST}", AUTH)[0] == 200


def test_a_template_named_after_start_is_served_at_once(out):
    """A camera added while running may name its recordings its own way."""
    (out / "gate.own.20261201T120000Z.mkv").write_bytes(b"mkv")
    templates = ["{camera}.rec.{start}.mp4"]
    files = RecordingFiles(str(out), lambda: templates, "{camera}.jsonl")
    assert files.file("gate.own.20261201T120000Z.mkv") is None
    templates.append("{camera}.own.{start}.mkv")
    assert files.file("gate.own.20261201T120000Z.mkv") == str(out / "gate.own.20261201T120000Z.mkv")
    assert [s["file"] for s in files.segments("gate")] == ["gate.own.20261201T120000Z.mkv"]


@pytest.mark.parametrize("jsonl", ["{camera}.jsonl", "detections.jsonl", "one.jsonl"],
                         ids=["per-segment", "hourly", "one-file"])
def test_every_segment_of_a_recording_gets_its_boxes_whatever_the_json_lines_rotation(tmp_path, jsonl):
    """Recording segments of 15 s beside JSON lines cut with each segment, hourly (one
    file shared by all the segments, stamped before them) or never: a segment whose
    predecessor began after its JSON lines file's stamp answered no frame."""
    out = tmp_path / "out"
    out.mkdir()
    stamps = ["20261201T120952Z", "20261201T121007Z", "20261201T121022Z", "20261201T121037Z", "20261201T121052Z"]
    names = [f"door.rec.{s}.mp4" for s in stamps]
    where = {"{camera}.jsonl": lambda s: f"door.{s}.jsonl", "detections.jsonl": lambda s: "detections.20261201T120000Z"
             ".jsonl", "one.jsonl": lambda s: "one.jsonl"}[jsonl]
    files: dict[str, list[str]] = {}
    for k, (s, name) in enumerate(zip(stamps, names)):
        (out / name).write_bytes(b"segment")
        for i in range(150):  # 15 s at 10 fps, beside another camera's rows
            files.setdefault(where(s), []).extend([row("door", 150 * k + i, name, i / 10), row("yard", i, None, None)])
    (out / "detections.20261201T110000Z.jsonl").write_text(row("door", 0, None, None) + "\n")  # the hour before
    for file, rows in files.items():
        (out / file).write_text("\n".join(rows) + "\n")
    recordings = RecordingFiles(str(out), lambda: ["{camera}.rec.{start}.mp4"], jsonl)
    for k, name in enumerate(names):
        assert [f["seq"] for f in recordings.boxes(name)] == list(range(150 * k, 150 * (k + 1))), name
        assert [f["t"] for f in recordings.boxes(name, 3.0, 3.2)] == [3.0, 3.1, 3.2]
