"""The events panel and the evidence files behind it: `/api/events` (newest first, after
an id, redacted), `/evidence/<path>` (only JPEG and MP4 from inside `<outputs.dir>/events/`,
byte ranges for the player), and the panel in headless Chromium with a running pipeline's
real events: thumbnails, live updates, a click that opens the snapshot and the clip,
names as text, 32 cameras. `PIPELINE_SCREENSHOTS=docs` writes `docs/events_panel.png`."""
from __future__ import annotations

import dataclasses
import json
import os
import time
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from pipeline.config.outputs import WebConfig
from pipeline.drawing import draw_detections
from pipeline.frames import ClassNames, Detections, Event, Frame
from pipeline.metrics.registry import CameraState, Metrics
from pipeline.metrics.snapshot import Snapshot
from pipeline.events.event_evidence import RecentEvents, Snapshots
from pipeline.sinks.preview import Preview
from pipeline.web.server import WebServer
from web_support import browser, get, live_config, raw, running, wait_for  # noqa: F401  (a fixture)

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def video_frame(path: str, index: int) -> np.ndarray:
    cap = cv2.VideoCapture(path)
    try:
        cap.set(cv2.CAP_PROP_POS_FRAMES, index % int(cap.get(cv2.CAP_PROP_FRAME_COUNT)))
        ok, image = cap.read()
    finally:
        cap.release()
    assert ok
    return image


def write_clip(path: Path, image: np.ndarray, frames: int = 20) -> None:
    """A short H.264 MP4 of a real frame drifting sideways (what a browser plays)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = (image.shape[0] // 2) * 2, (image.shape[1] // 2) * 2
    with av.open(str(path), "w") as out:
        s = out.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt, s.options = w, h, "yuv420p", {"preset": "ultrafast"}
        for i in range(frames):
            f = av.VideoFrame.from_ndarray(np.ascontiguousarray(np.roll(image[:h, :w], i * 4, axis=1)), format="bgr24")
            f.pts, f.time_base = i, Fraction(1, 10)
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode(None):
            out.mux(p)


@pytest.fixture
def evidence(tmp_path, sample_path) -> Path:
    """An outputs folder: a snapshot, a crop and a clip under events/, and things the
    server must never hand out: a picture beside events/, a symlink out, other files."""
    out = tmp_path / "out"
    image = video_frame(sample_path("vtest.mp4"), 40)
    (out / "events" / "campus").mkdir(parents=True)
    cv2.imwrite(str(out / "events" / "campus" / "20261201T120000.123Z_40.jpg"), image)
    cv2.imwrite(str(out / "events" / "campus" / "20261201T120000.123Z_40_0_cross_path_in_t7.crop.jpg"), image[:90, :60])
    write_clip(out / "events" / "campus" / "20261201T120000.123Z_40.mp4", image)
    cv2.imwrite(str(out / "secret.jpg"), image)
    cv2.imwrite(str(tmp_path / "outside.jpg"), image)
    (out / "events" / "campus" / "link.jpg").symlink_to(out / "secret.jpg")
    (out / "events" / "campus" / "notes.txt").write_text("not evidence")
    (out / "events" / "campus" / "half.jpg.tmp").write_bytes(b"\xff\xd8")
    (out / "events" / "campus" / "folder.jpg").mkdir()
    return out


@pytest.fixture
def serve():
    started = []

    def start(**kwargs) -> WebServer:
        preview = Preview()
        server = WebServer(WebConfig(port=0, token=TOKEN), kwargs.pop("snapshot", Snapshot), preview, **kwargs)
        server.start()
        started.append((server, preview))
        return server

    yield start
    for server, preview in started:
        server.close()
        preview.close()


def test_the_newest_events_after_an_id_newest_first_redacted(serve):
    recent = RecentEvents()
    recent.add([Event("campus", i, i, i, "person", "cross", line="path", direction="in") for i in range(5)])
    recent.add([Event("gate", 0, 0, 9, "person", "enter", zone="rtsp://admin:hunter2@10.0.0.9/live")])
    base = f"http://127.0.0.1:{serve(events=recent.newest).port}"
    status, body, headers = get(base + "/api/events", AUTH)
    events = json.loads(body)["events"]
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert [e["id"] for e in events] == [6, 5, 4, 3, 2, 1]
    assert events[0]["zone"] == "rtsp://admin:***@10.0.0.9/live"  # redacted like /api/cameras
    assert [e["id"] for e in json.loads(get(base + "/api/events?after=4", AUTH)[1])["events"]] == [6, 5]
    assert [e["id"] for e in json.loads(get(base + "/api/events?after=2&limit=2", AUTH)[1])["events"]] == [6, 5]
    assert json.loads(get(base + "/api/events?after=6", AUTH)[1]) == {"events": []}
    assert get(base + "/api/events")[0] == 401
    no_events = f"http://127.0.0.1:{serve().port}"
    assert get(no_events + "/api/events", AUTH)[:2] == (404, b"this run keeps no events for the page\n")


def test_evidence_is_served_from_the_events_folder_only(serve, evidence, tmp_path):
    port = serve(evidence_dir=str(evidence)).port
    base = f"http://127.0.0.1:{port}/evidence/"
    status, body, headers = get(base + "events/campus/20261201T120000.123Z_40.jpg", AUTH)
    assert status == 200 and headers["Content-Type"] == "image/jpeg"
    assert body == (evidence / "events" / "campus" / "20261201T120000.123Z_40.jpg").read_bytes()
    status, body, headers = get(base + "events/campus/20261201T120000.123Z_40.mp4", AUTH)
    assert status == 200 and headers["Content-Type"] == "video/mp4" and headers["Accept-Ranges"] == "bytes"
    assert get(base + "events/campus/20261201T120000.123Z_40.jpg")[0] == 401  # the token, like everything else

    def status_of(path: str) -> int:  # the path exactly as sent: no client tidies it first
        head = raw(port, f"GET /evidence/{path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                         "Connection: close\r\n\r\n".encode())
        return int(head.split(b" ", 2)[1])

    assert status_of("events/campus/20261201T120000.123Z_40_0_cross_path_in_t7.crop.jpg") == 200
    refused = ["events/../secret.jpg", "events/%2e%2e/secret.jpg", "events/campus/..%2f..%2fsecret.jpg",
               "secret.jpg", "events/campus/link.jpg", "events/campus/notes.txt", "events/campus/half.jpg.tmp",
               "events/campus/folder.jpg", "events/campus/missing.jpg", "%2fetc%2fpasswd", str(tmp_path / "outside.jpg"),
               "events/campus/" + str(tmp_path / "outside.jpg"), "events/campus/x%00.jpg", "events/./campus/link.jpg"]
    assert {p: status_of(p) for p in refused} == {p: 404 for p in refused}
    no_dir = f"http://127.0.0.1:{serve().port}/evidence/events/campus/20261201T120000.123Z_40.jpg"
    assert get(no_dir, AUTH)[0] == 404


def test_a_clip_is_served_in_byte_ranges(serve, evidence):
    base = f"http://127.0.0.1:{serve(evidence_dir=str(evidence)).port}/evidence/events/campus/20261201T120000.123Z_40.mp4"
    whole = (evidence / "events" / "campus" / "20261201T120000.123Z_40.mp4").read_bytes()
    status, body, headers = get(base, {**AUTH, "Range": "bytes=100-199"})
    assert (status, body, headers["Content-Range"]) == (206, whole[100:200], f"bytes 100-199/{len(whole)}")
    status, body, headers = get(base, {**AUTH, "Range": "bytes=-50"})
    assert (status, body) == (206, whole[-50:])
    status, body, _ = get(base, {**AUTH, "Range": f"bytes={len(whole) - 10}-"})
    assert (status, body) == (206, whole[-10:])
    status, _, headers = get(base, {**AUTH, "Range": f"bytes={len(whole)}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{len(whole)}"
    assert get(base, {**AUTH, "Range": "bytes=0-1,5-9"})[:2] == (200, whole)  # several ranges: the whole file


# -- the panel in a browser ------------------------------------------------------------------
def event_records(jsonl: Path, camera: str, count: int) -> list[dict]:
    """The first frames of `camera` that carry analytics events, once `count` are written."""
    def found() -> list[dict]:
        if not jsonl.exists():
            return []
        lines = [json.loads(x) for x in jsonl.read_text().splitlines() if x.endswith("}")]
        frames = [r for r in lines if r["camera"] == camera and r.get("events")]
        return frames[:count] if len(frames) >= count else []
    return wait_for(found, 120)


def snapshot_frame(record: dict, image: np.ndarray) -> Frame:
    """The frame of a JSON line, with its boxes drawn, as the sink would hand it to `Snapshots`."""
    det = record["detections"]
    names = ClassNames([d["class"] for d in det])
    detections = Detections(xyxy=np.array([d["box"] for d in det], np.float32).reshape(-1, 4),
                            score=np.array([d["score"] for d in det], np.float32),
                            class_id=np.arange(len(det), dtype=np.int64), names=names,
                            track_id=np.array([d.get("track", -1) for d in det], np.int64))
    draw_detections(image, detections)
    return Frame(camera=record["camera"], seq=record["seq"], pts=record["pts"], time_base=None, image=image,
                 t_capture=time.time(), detections=detections, events=[event_of(e) for e in record["events"]])


def event_of(line: dict) -> Event:
    """An event as its JSON line has it (`class` is `cls`)."""
    known = {f.name for f in dataclasses.fields(Event)}
    return Event(**{("cls" if k == "class" else k): v for k, v in line.items() if k in known | {"class"}})


class Evidence:
    """Real events of a running pipeline made into evidence by the real `Snapshots`, kept
    by a real `RecentEvents` (what the graph does once it wires snapshots)."""

    def __init__(self, out: Path, video: str):
        self.out, self.video = out, video
        self.recent = RecentEvents()
        self.snapshots = Snapshots(str(out), lambda events, jpeg: self.recent.add(events))
        self.snapshots.start()

    def add(self, record: dict, clip: bool = False) -> None:
        frame = snapshot_frame(record, video_frame(self.video, record["seq"]))
        if clip:
            relative = f"events/{frame.camera}/clip_{frame.seq}.mp4"
            write_clip(self.out / relative, frame.image)
            for event in frame.events:
                event.clip = relative
        self.snapshots.frame(frame, time.time())

    def wait(self, count: int) -> bool:
        return bool(wait_for(lambda: len(self.recent.newest(200)) >= count, 30))


PANEL = """return [...document.querySelectorAll("#event-list .event")].map((b) => {
  const img = b.querySelector("img.thumb");
  return [Number(b.dataset.id), b.querySelector(".what").innerText, img ? img.naturalWidth : 0];
});"""


def test_the_panel_shows_real_events_with_thumbnails_live_and_opens_their_evidence(model_path, sample_path,
                                                                                 running, tmp_path):
    cfg = live_config(model_path, sample_path)
    cfg["sources"] = [s for s in cfg["sources"] if s["id"] == "campus"]  # the one with the line and the zone
    p = running(cfg)
    records = event_records(tmp_path / "out" / "detections.jsonl", "campus", 6)
    assert records, "no analytics events in two minutes"
    evidence = Evidence(tmp_path / "out", sample_path("vtest.mp4"))
    for i, record in enumerate(records[:5]):
        evidence.add(record, clip=i == 4)
    assert evidence.wait(5)
    server = WebServer(WebConfig(port=0), p.snapshot, p.side.preview, cameras=lambda: p.metrics.cameras,
                       events=evidence.recent.newest, evidence_dir=str(tmp_path / "out"))
    server.start()
    d = browser(1400, 900)
    try:
        d.get(f"http://127.0.0.1:{server.port}/")
        first = wait_for(lambda: (lambda rows: rows if len(rows) >= 5 and all(r[2] for r in rows) else None)(
            d.execute_script(PANEL)))
        evidence.add(records[5])  # a new event while the page is open
        live = wait_for(lambda: (lambda rows: rows if len(rows) > len(first) and rows[0][2] else None)(
            d.execute_script(PANEL)), 30)
        wait_for(lambda: all(d.execute_script("return [...document.querySelectorAll('img.video')].map("
                                              "(i) => i.naturalWidth)")), 30)
        shot = d.get_screenshot_as_png()
        with_clip = next(e["id"] for e in evidence.recent.newest(200) if e.get("clip"))
        d.find_element("css selector", f'#event-list .event[data-id="{with_clip}"]').click()
        opened = wait_for(lambda: d.execute_script(
            "const b = document.getElementById('evidence'), v = b.querySelector('.clip');"
            "return b.open && b.querySelector('.snapshot').naturalWidth > 0 && !v.hidden && v.readyState >= 1 "
            "&& [b.querySelector('.caption').textContent, v.duration, v.error && v.error.code];"), 30)
    finally:
        d.quit()
        server.close()
        evidence.snapshots.close()
    (tmp_path / "events_panel.png").write_bytes(shot)
    if os.environ.get("PIPELINE_SCREENSHOTS"):
        folder = Path(os.environ["PIPELINE_SCREENSHOTS"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "events_panel.png").write_bytes(shot)
    assert first and [r[0] for r in first] == sorted((r[0] for r in first), reverse=True)  # newest first
    assert all(r[2] > 0 for r in first)  # every thumbnail loaded through /evidence
    names = {e.get("line") or e.get("zone") for r in records[:5] for e in r["events"]}
    assert all("campus" in r[1] for r in first) and all(any(n in r[1] for n in names) for r in first)
    assert live and live[0][0] > first[0][0]  # the new event came on top, without a reload
    assert opened and opened[0].startswith("campus: ") and opened[1] > 1.5 and opened[2] is None  # the clip plays


def test_event_names_are_text_and_the_panel_works_beside_32_cameras(serve, tmp_path):
    """Line and camera names come from the config: shown literally, never run. With 32
    tiles the panel stays on screen while the tiles scroll."""
    metrics = Metrics()
    for i in range(32):
        metrics.camera_state(f"cam{i:02d}", CameraState.STREAMING)
    evil = '<img src=x onerror="document.title=`owned`">'
    recent = RecentEvents()
    recent.add([Event(f"cam{i:02d}", 0, 0, i, "person", "cross", line=evil if i == 31 else "gate", direction="in")
                for i in range(32)])
    server = serve(snapshot=metrics.snapshot, cameras=lambda: metrics.cameras, events=recent.newest,
                   evidence_dir=str(tmp_path))
    d = browser(1400, 900)
    try:
        d.get(f"http://127.0.0.1:{server.port}/?token={TOKEN}")
        rows = wait_for(lambda: (lambda r: r if len(r) == 32 else None)(d.execute_script(PANEL)))
        tiles = wait_for(lambda: len(d.find_elements("css selector", ".tile")) == 32, 30)
        d.execute_script("window.scrollTo(0, document.body.scrollHeight)")
        time.sleep(0.5)
        panel = d.execute_script("const r = document.getElementById('events').getBoundingClientRect();"
                                 "return r.top >= 0 && r.top < window.innerHeight && r.width > 200")
        d.find_elements("css selector", "#event-list .event")[0].click()
        caption = wait_for(lambda: d.execute_script("const b = document.getElementById('evidence');"
                                                    "return b.open && b.querySelector('.caption').textContent"), 10)
        time.sleep(0.5)  # an image that fails to load runs its onerror at once
        injected = d.execute_script("return document.querySelectorAll('.what img, .caption img').length")
        title = d.title
    finally:
        d.quit()
    assert rows and tiles and panel  # the panel is beside the last row of tiles too
    assert evil in rows[0][1] and caption == f"cam31: person #31 crossed {evil} in"
    assert injected == 0 and title != "owned"
