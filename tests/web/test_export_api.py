"""`GET /api/export` on a real server over a real recording (the recorder's 1 s segments
of a made clip): the MP4 of the range as an attachment, the same packets `export` copies;
a gap said in `X-Export-Note`; hostile parameters 400 with one line naming the
parameter, a range nothing covers 404, no token 401."""
from __future__ import annotations

import os
import shutil
import time
import urllib.parse

import av
import pytest

from pipeline.config import SourceConfig
from pipeline.config.outputs import RecordConfig, WebConfig
from pipeline.metrics.snapshot import Snapshot
from pipeline.recording.recorder import Recording
from pipeline.recording.export import export, pieces_of, when
from pipeline.recording.segments import segment_files, stamp
from pipeline.sinks.preview import Preview
from pipeline.web.recordings import RecordingFiles
from pipeline.web.server import WebServer
from pipeline.sources.connection import Connection
from synthetic import Mover, picture, render
from web_support import get, running  # noqa: F401  (a fixture)

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    """`cam`'s 4 s recorded in 1 s segments, and `gap`: the same files with nothing for
    10 s after the second."""
    folder = tmp_path_factory.mktemp("api")
    source = str(folder / "v.mp4")
    render([Mover(picture("chelsea", 40), (0, 20), (100, 40))], source, frames=40, size=(160, 96), fps=10,
           codec=("libx264", {"bf": "2", "g": "5", "preset": "ultrafast"}))
    failures: list[BaseException] = []
    rec = Recording("cam", str(folder / "out"), RecordConfig(enabled=True, segment_s=1), 1, False,
                    path=lambda s: str(folder / "out" / f"cam.rec.{s}.mp4"), on_failure=failures.append)
    connection = Connection(SourceConfig(id="cam", uri=source), lambda why: None, tap=rec)
    assert sum(1 for _ in connection.frames(lambda: False)) == 40
    connection.close()
    rec.close()
    assert not failures
    for i, (s, path) in enumerate(segment_files(str(folder / "out" / "cam.rec.{start}.mp4"))):
        t = pieces_of([(s, path)])[0].start + (10 if i >= 2 else 0)
        shutil.copy(path, folder / "out" / f"gap.rec.{stamp(t)}.mp4")
    return folder / "out"


@pytest.fixture(scope="module")
def base(out):
    preview = Preview()
    files = RecordingFiles(str(out), lambda: ["{camera}.rec.{start}.mp4"], "{camera}.jsonl", export_max_s=60)
    server = WebServer(WebConfig(port=0, token=TOKEN), Snapshot, preview, cameras=lambda: ["cam", "yard"],
                       recordings=files)
    server.start()
    yield f"http://127.0.0.1:{server.port}"
    server.close()
    preview.close()


def t0(out, camera: str = "cam") -> int:
    return pieces_of(segment_files(str(out / f"{camera}.rec.{{start}}.mp4")))[0].start


def ask(base: str, headers: dict | None = AUTH, **params) -> tuple[int, bytes, dict]:
    return get(f"{base}/api/export?{urllib.parse.urlencode(params)}", headers)


def packets(path: str) -> list[tuple[bytes, bool, int, int]]:
    with av.open(path) as c:
        return [(bytes(p), bool(p.is_keyframe), p.pts, p.dts) for p in c.demux(video=0) if p.size]


def test_an_export_is_the_mp4_of_the_range_as_an_attachment(base, out, tmp_path):
    start = t0(out)
    status, body, headers = ask(base, camera="cam", start=when(start + 1), end=str(start + 3.5))
    assert status == 200 and headers["Content-Type"] == "video/mp4" and "X-Export-Note" not in headers
    assert headers["Content-Disposition"] == f'attachment; filename="cam.{stamp(start + 1)}-{stamp(start + 3)}.mp4"'
    (tmp_path / "got.mp4").write_bytes(body)
    pieces = pieces_of(segment_files(str(out / "cam.rec.{start}.mp4")))
    made = export("cam", pieces, start + 1, start + 3.5, str(tmp_path / "made.mp4"), 60)
    got = packets(str(tmp_path / "got.mp4"))
    assert got == packets(made.path) and got[0][1] and len(got) == made.video == 25
    assert float(headers["X-Export-Start"]) == pytest.approx(made.first, abs=1e-3)
    # made beside the recordings, then removed once sent (the last bytes may reach us first)
    deadline = time.monotonic() + 10
    while [f for f in os.listdir(out) if f.startswith(".export")] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [f for f in os.listdir(out) if f.startswith(".export")]


def test_a_range_over_a_gap_says_which_in_its_note(base, out):
    start = t0(out, "gap")
    status, _, headers = ask(base, camera="gap", start=str(start), end=str(start + 14))
    assert status == 200
    assert headers["X-Export-Note"].startswith(f"gap: no recording from {when(start + 1.9)} to {when(start + 12)} "
                                               "(10.1 s, at 1.9 s into the export)")


@pytest.mark.parametrize("params, named", [
    ({"camera": "cam", "start": "yesterday", "end": "1"}, "start: not a time: 'yesterday'"),
    ({"camera": "cam", "start": "2026-13-45T00:00:00", "end": "1"}, "start: not a time"),
    ({"camera": "cam", "start": "1", "end": "1e400"}, "end: '1e400' is outside"),
    ({"camera": "cam", "start": "10", "end": "5"}, "end: 1970-01-01T00:00:05Z is not after start"),
    ({"camera": "cam", "start": "0", "end": "61"}, "end: the range is 61 s; an export covers at most 60 s "
                                                   "(outputs.record.export_max_s)"),
    ({"camera": "../etc", "start": "0", "end": "1"}, "camera: '../etc' is not a camera id"),
    ({"camera": "cam/../../x", "start": "0", "end": "1"}, "camera: 'cam/../../x' is not a camera id"),
    ({"camera": "cam\0", "start": "0", "end": "1"}, "camera: 'cam?' is not a camera id"),
    ({"camera": "x" * 5000, "start": "0", "end": "1"}, "camera: 'xxxxxxxx"),
    ({"camera": "nope", "start": "0", "end": "1"}, "camera: no camera 'nope' here, nor recordings of one"),
    ({"camera": "cam", "start": "0"}, "end: required"),
    ({"camera": "cam", "start": "0", "end": "1", "file": "/etc/passwd"}, "'file': not a parameter of export"),
    ({"camera": "cam", "start": "0", "end": "1", "token": TOKEN}, None),  # the token's other place: no mistake
])
def test_hostile_parameters_are_400_with_one_line_naming_the_parameter(base, params, named):
    status, body, _ = ask(base, **params)
    if named is None:
        assert status == 404
        return
    line = body.decode()
    assert status == 400 and line.startswith(named) and line.endswith("\n") and line.count("\n") == 1
    assert len(line) < 300


def test_a_parameter_given_twice_is_400(base):
    status, body, _ = get(f"{base}/api/export?camera=cam&camera=yard&start=0&end=1", AUTH)
    assert (status, body) == (400, b"camera: given 2 times; give it once\n")


def test_a_range_no_recording_covers_is_404_and_no_token_401(base, out):
    start = t0(out)
    status, body, _ = ask(base, camera="cam", start=str(start - 100), end=str(start - 50))
    assert (status, body.decode()) == (404, f"camera cam: no recording covers {when(start - 100)} to "
                                            f"{when(start - 50)}\n")
    assert ask(base, camera="yard", start=str(start), end=str(start + 5))[0] == 404  # a camera that records nothing
    assert ask(base, None, camera="cam", start=str(start), end=str(start + 2))[0] == 401


def test_exports_beyond_those_running_are_503_until_one_ends(base, out):
    from pipeline.web import export_api

    start = t0(out)
    # every slot taken (waiting for one a reply just sent may not have given back yet)
    held = [export_api._running.acquire(timeout=10) for _ in range(export_api.AT_ONCE)]
    try:
        assert all(held)
        status, body, headers = ask(base, camera="cam", start=str(start), end=str(start + 2))
        assert (status, headers["Retry-After"]) == (503, "5") and body.count(b"\n") == 1
    finally:
        for _ in filter(None, held):
            export_api._running.release()
    assert ask(base, camera="cam", start=str(start), end=str(start + 2))[0] == 200


def test_a_runs_own_server_exports_its_recording_with_the_configured_limit(model_path, running, tmp_path):
    """A real run records a made clip in 2 s segments with the page on: the whole recording
    exported over its own server is the clip's packets byte for byte; its config's limit holds."""
    from conftest import detector_model

    source = str(tmp_path / "clip.mp4")
    render([Mover(picture("chelsea", 40), (0, 20), (100, 40))], source, frames=60, size=(160, 96), fps=10,
           codec=("libx264", {"bf": "2", "g": "10", "preset": "ultrafast"}))
    p = running({"sources": [{"id": "lab", "uri": source}], "models": {"det": detector_model(model_path)},
                 "graph": [{"detect": {"model": "det"}}],
                 "outputs": {"record": {"enabled": True, "segment_s": 2, "export_max_s": 30},
                             "web": {"port": 0, "token": TOKEN}}})
    assert p.wait(120), "the run did not end"
    out = tmp_path / "out"
    start = t0(out, "lab")
    assert len(segment_files(str(out / "lab.rec.{start}.mp4"))) == 3
    base = f"http://127.0.0.1:{p.side.web.port}"
    status, body, _ = ask(base, camera="lab", start=str(start), end=str(start + 30))
    assert status == 200
    (tmp_path / "got.mp4").write_bytes(body)
    assert [q[:2] for q in packets(str(tmp_path / "got.mp4"))] == [q[:2] for q in packets(source)]
    status, body, _ = ask(base, camera="lab", start=str(start), end=str(start + 31))
    assert (status, body) == (400, b"end: the range is 31 s; an export covers at most 30 s "
                                   b"(outputs.record.export_max_s)\n")
