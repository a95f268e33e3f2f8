"""The page with many cameras, in a real browser: every tile plays its camera's own video
over a WebSocket of its own while in view (a browser opens at most six HTTP connections
per host: a page that held one endless MJPEG stream per tile showed six cameras and
froze), the MJPEG stream stays for tools. Also /metrics with the event destinations."""
from __future__ import annotations

import json
import time
from fractions import Fraction

import av
import pytest

from conftest import detector_model
from web_support import browser, get, running, wait_for  # noqa: F401  (a fixture)

CAMERAS = 12

# each tile's video: the pictures it presented so far (0: none yet, or the tile shows stills)
PRESENTED = """
return [...document.querySelectorAll(".tile")].map((t) => {
  const v = t.querySelector("video.live");
  return [t.dataset.camera, v && !v.hidden ? v.getVideoPlaybackQuality().totalVideoFrames : 0];
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


def test_twelve_cameras_all_play_their_video_and_the_tiles_out_of_view_close_their_sockets(model_path, small_clip,
                                                                                         running):
    """Each tile plays its camera's own video over a socket of its own (a browser's six
    connections per host bound HTTP requests, not WebSockets), the figures keep
    refreshing, and only the tiles in view stream."""
    p = running(many_cameras_config(model_path, small_clip))
    api = f"http://127.0.0.1:{p.side.web.port}/api/cameras"
    viewers = lambda: json.loads(get(api)[1])["live_view"]  # noqa: E731
    d = browser(2200, 1300)  # the twelve tiles in view at once, beside the events panel
    try:
        d.get(f"http://127.0.0.1:{p.side.web.port}/")
        shown = wait_for(lambda: (f := dict(d.execute_script(PRESENTED))) and len(f) == CAMERAS
                         and min(f.values()) > 0 and f, 90)
        first = d.find_element("id", "total").text
        watching = wait_for(lambda: len(viewers()["video"]) == CAMERAS and viewers(), 20)
        time.sleep(3)
        later = dict(d.execute_script(PRESENTED))
        second = d.find_element("id", "total").text
        d.set_window_size(2200, 400)  # now only the first row is in view: the others close their sockets
        time.sleep(1)
        visible = {t.get_attribute("data-camera") for t in d.find_elements("css selector", ".tile")
                   if d.execute_script("const r = arguments[0].getBoundingClientRect();"
                                       "return r.top < window.innerHeight && r.bottom > 0", t)}
        fewer = wait_for(lambda: set(viewers()["video"]) == visible and viewers(), 20)
    finally:
        d.quit()
    assert shown, "not every tile presented a picture of its video"
    assert "frames" in first and first != second  # the header kept refreshing
    assert all(later[cam] > shown[cam] for cam in shown)  # every tile's video keeps presenting pictures
    assert watching and sorted(watching["video"]) == [f"cam{i:02d}" for i in range(CAMERAS)]
    assert 0 < len(visible) < CAMERAS
    assert fewer and set(fewer["video"]) == visible


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
