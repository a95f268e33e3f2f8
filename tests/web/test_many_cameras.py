"""The page with many cameras, in a real browser: a browser opens at most six connections
per host, so a page that held one endless MJPEG stream per tile showed six cameras and
froze (tiles 7+ black, the figures never refreshed). The tiles fetch stills instead, one
request at a time, only while in view. Also /metrics with the event destinations."""
from __future__ import annotations

import json
import time
from fractions import Fraction

import av
import pytest

from conftest import detector_model
from web_support import browser, get, running, wait_for  # noqa: F401  (a fixture)

CAMERAS = 12

# the mean brightness of a tile's picture, drawn on a canvas (a blob URL of this origin)
BRIGHTNESS = """
return [...document.querySelectorAll(".tile")].map((t) => {
  const img = t.querySelector("img.video");
  if (!img.complete || !img.naturalWidth) return [t.dataset.camera, 0];
  const c = document.createElement("canvas");
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext("2d");
  g.drawImage(img, 0, 0);
  const px = g.getImageData(0, 0, c.width, c.height).data;
  let sum = 0;
  for (let i = 0; i < px.length; i += 4) sum += px[i] + px[i + 1] + px[i + 2];
  return [t.dataset.camera, sum / (px.length / 4) / 3];
});
"""


@pytest.fixture(scope="module")
def small_clip(tmp_path_factory, sample_path) -> str:
    """Two seconds of bikes.mp4 at 5 fps and 320 pixels wide: twelve of them in real time
    cost little CPU."""
    path = str(tmp_path_factory.mktemp("clips") / "small.mp4")
    with av.open(sample_path("bikes.mp4")) as inp, av.open(path, "w") as out:
        s = out.add_stream("libx264", rate=5)
        s.width, s.height, s.pix_fmt, s.options = 320, 136, "yuv420p", {"preset": "ultrafast"}
        for i, frame in enumerate(inp.decode(video=0)):
            if i >= 50:
                break
            if i % 5 == 0:
                small = frame.reformat(width=320, height=136, format="yuv420p")
                small.pts, small.time_base = i // 5, Fraction(1, 5)
                for p in s.encode(small):
                    out.mux(p)
        for p in s.encode(None):
            out.mux(p)
    return path


def many_cameras_config(model_path, clip: str) -> dict:
    return {"sources": [{"id": f"cam{i:02d}", "uri": clip, "realtime": True, "loop": True, "max_fps": 2}
                        for i in range(CAMERAS)],
            "models": {"det": detector_model(model_path, score_threshold=0.2)},
            "graph": [{"detect": {"model": "det"}}, "annotate"],
            "outputs": {"video": {"enabled": False}, "jsonl": {"enabled": False}, "web": {"port": 0, "fps": 2}}}


def test_twelve_cameras_all_show_pictures_and_the_figures_keep_updating(model_path, small_clip, running):
    p = running(many_cameras_config(model_path, small_clip))
    d = browser(2200, 1300)  # the twelve tiles in view at once, beside the events panel
    try:
        d.get(f"http://127.0.0.1:{p.side.web.port}/")
        deadline = time.monotonic() + 60
        while True:
            shown = dict(d.execute_script(BRIGHTNESS))
            if (len(shown) == CAMERAS and min(shown.values()) > 20) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        first = d.find_element("id", "total").text
        api = f"http://127.0.0.1:{p.side.web.port}/api/cameras"
        viewers = lambda: json.loads(get(api)[1])["live_view"]  # noqa: E731
        watching = wait_for(lambda: viewers()["viewers"] == CAMERAS and viewers(), 10)
        time.sleep(3)
        second = d.find_element("id", "total").text
        seqs = d.execute_script("return [...document.querySelectorAll('img.video')].map((i) => i.src)")
        time.sleep(3)
        later = d.execute_script("return [...document.querySelectorAll('img.video')].map((i) => i.src)")
        d.set_window_size(2200, 400)  # now only the first row is in view: the others stop asking
        time.sleep(1)
        visible = {t.get_attribute("data-camera") for t in d.find_elements("css selector", ".tile")
                   if d.execute_script("const r = arguments[0].getBoundingClientRect();"
                                       "return r.top < window.innerHeight && r.bottom > 0", t)}
        served = {cam: h.count for cam, h in p.side.web.view_latency.items()}
        time.sleep(3)
        served = {cam: h.count - served[cam] for cam, h in p.side.web.view_latency.items()}
        watching_fewer = viewers()
    finally:
        d.quit()
    assert sorted(shown) == [f"cam{i:02d}" for i in range(CAMERAS)]
    black = {cam: round(v, 1) for cam, v in shown.items() if v <= 20}
    assert not black  # with a stream per tile, tiles 7-12 never got a picture
    assert "frames" in first and first != second  # the header kept refreshing
    assert all(a != b for a, b in zip(seqs, later))  # every tile's picture keeps changing
    assert 0 < len(visible) < CAMERAS
    assert watching and watching["watched"] == CAMERAS  # the twelve tiles in view (it read 0)
    assert watching_fewer["viewers"] == watching_fewer["watched"] == len(visible)  # the tiles out of view stopped
    assert all(served[cam] > 0 for cam in visible) and not any(served[cam] for cam in set(served) - visible)


def test_the_mjpeg_stream_still_serves_one_camera(model_path, small_clip, running):
    """Tools and the benchmark read `/stream/<camera>`: it stays."""
    import urllib.request

    p = running(many_cameras_config(model_path, small_clip))
    with urllib.request.urlopen(f"http://127.0.0.1:{p.side.web.port}/stream/cam03", timeout=20) as r:
        assert r.headers["Content-Type"].startswith("multipart/x-mixed-replace")
        data = b""
        while data.count(b"\xff\xd8") < 2:
            data += r.read1(65536)
    assert data.startswith(b"--frame\r\nContent-Type: image/jpeg")


def test_metrics_show_the_event_destinations_with_secrets_masked(model_path, sample_path, running):
    import re

    from brokers import Webhook
    from web_support import live_config

    hook = Webhook()
    try:
        cfg = live_config(model_path, sample_path)
        cfg["outputs"]["events"] = {"webhook": {"url": f"{hook.url}?token=planted-s3cret"}}
        p = running(cfg)
        label = f'destination="{hook.url}?token=***"'
        deadline = time.monotonic() + 30
        while True:  # the cameras' state changes are events: some are sent at once
            metrics = get(f"http://127.0.0.1:{p.side.web.port}/metrics")[1].decode()
            sent = re.search(rf"^pipeline_events_sent_total\{{{re.escape(label)}\}} (\S+)$", metrics, re.M)
            if (sent and float(sent.group(1)) >= 1) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        api = get(f"http://127.0.0.1:{p.side.web.port}/api/cameras")[1].decode()
    finally:
        hook.close()
    assert sent and float(sent.group(1)) >= 1, metrics
    assert f"pipeline_events_dropped_total{{{label}}} 0.0" in metrics
    assert f"pipeline_events_waiting{{{label}}}" in metrics
    assert "planted-s3cret" not in metrics and "planted-s3cret" not in api


def test_stills_keep_a_camera_watched_for_a_while_and_share_its_pictures(model_path, sample_path, running):
    from web_support import live_config

    p = running(live_config(model_path, sample_path, fps=2))
    url = f"http://127.0.0.1:{p.side.web.port}/frame/street.jpg"
    assert p.side.web.api_snapshot()["live_view"]["encoded"] == 0
    began, before = time.monotonic(), p.side.preview.encoded
    seqs = set()
    for _ in range(20):  # asked far faster than the live rate: the newest picture each time, no encoding of its own
        status, _, headers = get(url)
        assert status == 200
        seqs.add(int(headers["X-Seq"]))
    made = p.side.preview.encoded - before
    assert made <= (time.monotonic() - began) * 2 + 2 and len(seqs) <= made
    fresh = set()
    for _ in range(8):  # at the live rate: a fresh picture each time (a still was the first one, for ever)
        time.sleep(0.5)
        fresh.add(int(get(url)[2]["X-Seq"]))
    assert len(fresh) >= 4
    time.sleep(p.side.web.still_lease_s + 1)  # nobody asked since: the camera is no longer watched
    idle = p.side.preview.encoded
    time.sleep(2)
    assert p.side.preview.encoded == idle
