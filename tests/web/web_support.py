"""What the live view's tests share: the two-camera config, a running pipeline (the
`running` fixture: import it), plain HTTP and raw socket requests, headless Chromium
(Debian's, installed by .ci/run) and a look for a box drawn in its screenshot."""
from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from chromium import CHROMEDRIVER, chromium
from conftest import detector_model



def live_config(model_path, sample_path, **web) -> dict:
    """Two looping cameras in real time, at 5 fps: the page's figures move, and the
    machine the tests share is spared most of the clips' frames."""
    return {"sources": [{"id": "campus", "uri": sample_path("vtest.mp4"), "realtime": True, "loop": True, "max_fps": 5},
                        {"id": "street", "uri": sample_path("bikes.mp4"), "realtime": True, "loop": True,
                         "max_fps": 5}],
            "models": {"det": detector_model(model_path, score_threshold=0.2)},
            "graph": [{"detect": {"model": "det"}}, "track",
                      {"analytics": {"cameras": {"campus": {
                          "lines": [{"name": "path", "points": [[0, 300], [767, 250]], "classes": ["person"]}],
                          "zones": [{"name": "lawn", "polygon": [[0, 330], [767, 280], [767, 575], [0, 575]]}]}}}},
                      "annotate"],
            "outputs": {"web": {"port": 0, **web}}}


@pytest.fixture
def running(tmp_path, write_config):
    """Start a pipeline from a config dict; stopped and closed after the test."""
    from pipeline.config import load_config
    from pipeline.graph import Pipeline

    started = []

    def start(cfg: dict) -> Pipeline:
        cfg["outputs"]["dir"] = str(tmp_path / "out")
        p = Pipeline(load_config(write_config(cfg)))
        p.start()
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop(abort=True)
        p.close(timeout=10)


def get(url: str, headers: dict | None = None, method: str = "GET", body: bytes | None = None,
        timeout: float = 10) -> tuple[int, bytes, dict]:
    """One request (any method); the status, body and headers, whatever the status."""
    request = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def raw(port: int, request: bytes, timeout: float = 20) -> bytes:
    """Send `request` as it is and read the answer until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        c.sendall(request)
        data = b""
        while chunk := c.recv(65536):
            data += chunk
        return data


def browser(width: int = 1320, height: int = 820):
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes") and not os.path.exists(CHROMEDRIVER):
        pytest.skip("Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    return chromium(width, height)[0]


def wait_for(condition, seconds: float = 60, every: float = 0.1):
    """`condition()`'s first true value, or its last value after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


# what a tile shows: its camera's video (the boxes drawn over it), or stills where video cannot play
SHOWN = """const shown = (t) => { const v = t.querySelector("video.live");
  return v && !v.hidden ? v : t.querySelector("img.video"); };
const playing = (e) => e.tagName === "VIDEO" ? e.getVideoPlaybackQuality().totalVideoFrames > 0 : e.naturalWidth > 0;
"""


def play_event_recording(d, base: str, event_id) -> None:
    """On the live page at `base`: open the event `event_id` in the events panel and press
    its `play the recording`."""
    d.get(base + "/")
    item = wait_for(lambda: d.find_elements("css selector", f'#event-list .event[data-id="{event_id}"]'))
    assert item, "the event is not in the panel"
    item[0].click()
    button = wait_for(lambda: next((b for b in d.find_elements("css selector", "#evidence .play-recording")
                                    if b.is_displayed()), None), 20)
    assert button, "no play the recording button on the event"
    button.click()


def outline_drawn(shot: np.ndarray, box: tuple[float, float, float, float], rgb: tuple[int, int, int]) -> float:
    """The share of points along the rectangle's weakest side with a pixel of `rgb` within 3 px."""
    x1, y1, x2, y2 = box
    hit = (np.abs(shot.astype(int) - np.array(rgb)).sum(axis=2) < 60)
    sides = []
    for ends, vertical in ((((x1, y1), (x2, y1)), False), (((x1, y2), (x2, y2)), False),
                           (((x1, y1), (x1, y2)), True), (((x2, y1), (x2, y2)), True)):
        (ax, ay), (bx, by) = ends
        found = 0
        points = [(ax + (bx - ax) * i / 19, ay + (by - ay) * i / 19) for i in range(1, 19)]
        for x, y in points:
            x, y = round(x), round(y)
            near = hit[y, x - 3:x + 4] if vertical else hit[y - 3:y + 4, x]
            found += bool(near.any())
        sides.append(found / len(points))
    return min(sides)
