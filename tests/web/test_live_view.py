"""The live web view in a real browser (Debian's headless Chromium, installed by .ci/run):
both camera tiles with boxes, video that moves, counts and states in the page's DOM;
the API and metrics on the same port; the token; no work while nobody watches.
`PIPELINE_SCREENSHOTS=docs` writes the page of the first test to `docs/live_view.png`."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.drawing import class_color
from web_support import browser, get, live_config, running  # noqa: F401  (a fixture)


def video_of(shot: np.ndarray, rect: dict) -> np.ndarray:
    x, y, w, h = (int(rect[k]) for k in ("x", "y", "width", "height"))
    return shot[y:y + h, x:x + w, :3]


def box_pixels(shot: np.ndarray, rect: dict) -> int:
    """Pixels of a tile's video drawn in the colours of the boxes (person, bicycle, car)."""
    region = video_of(shot, rect).astype(int)
    hits = 0
    for cid in (0, 1, 2):
        b, g, r = class_color(cid)
        hits += int((np.abs(region - np.array([r, g, b])).sum(axis=2) < 60).sum())  # the screenshot is RGB
    return hits


def capture(d, tiles: dict) -> tuple[np.ndarray, dict[str, dict]]:
    """A screenshot (RGB) and each tile's video rectangle, read just before it."""
    import cv2
    from selenium.webdriver.common.by import By

    rects = {cam: d.execute_script("return arguments[0].getBoundingClientRect().toJSON()",
                                   t.find_element(By.CSS_SELECTOR, "img.video")) for cam, t in tiles.items()}
    png = d.get_screenshot_as_png()
    return cv2.cvtColor(cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB), rects


@pytest.mark.serial  # timed against the wall clock: alone, after the parallel part of `make test`
def test_the_page_shows_both_cameras_live_with_boxes_counts_and_states(model_path, sample_path, running, tmp_path):
    import cv2
    from selenium.webdriver.common.by import By

    p = running(live_config(model_path, sample_path))
    d = browser()
    try:
        d.get(f"http://127.0.0.1:{p.side.web.port}/")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            imgs = d.find_elements(By.CSS_SELECTOR, ".tile img.video")
            if len(imgs) == 2 and all(d.execute_script("return arguments[0].naturalWidth", i) > 0 for i in imgs):
                break
            time.sleep(0.2)
        time.sleep(2)  # a couple of refreshes of the stats
        tiles = {t.get_attribute("data-camera"): t for t in d.find_elements(By.CSS_SELECTOR, ".tile")}
        assert sorted(tiles) == ["campus", "street"]
        for cam, t in tiles.items():
            assert t.find_element(By.CSS_SELECTOR, ".state").text == "streaming"
            assert float(t.find_element(By.CSS_SELECTOR, ".fps").text) > 0
            assert t.find_element(By.CSS_SELECTOR, ".p99").text != "-"
        counts = tiles["campus"].find_element(By.CSS_SELECTOR, ".counts").text
        assert "path: in" in counts and "lawn:" in counts and "inside" in counts
        # a loaded machine may paint a tile late: look again (up to 20 s) before judging
        deadline = time.monotonic() + 20
        while True:
            first = capture(d, tiles)
            if all(box_pixels(first[0], rect) > 200 for rect in first[1].values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        time.sleep(1.0)
        second = capture(d, tiles)
        cv2.imwrite(str(tmp_path / "live_view.png"), cv2.cvtColor(first[0], cv2.COLOR_RGB2BGR))
        if os.environ.get("PIPELINE_SCREENSHOTS"):
            folder = Path(os.environ["PIPELINE_SCREENSHOTS"])
            folder.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(folder / "live_view.png"), cv2.cvtColor(first[0], cv2.COLOR_RGB2BGR))
    finally:
        d.quit()
    for cam, rect in first[1].items():
        assert box_pixels(first[0], rect) > 200, cam  # boxes and labels drawn on both tiles
        a, b = video_of(first[0], rect), video_of(second[0], second[1][cam])
        h, w = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
        moved = np.abs(a[:h, :w].astype(int) - b[:h, :w].astype(int)).mean()
        assert moved > 1.0, cam  # a second apart, the picture changed: the video is live
    assert p.snapshot().cameras["campus"].processed > 0


def test_api_and_metrics_share_the_port_and_cost_nothing_unwatched(model_path, sample_path, running):
    p = running(live_config(model_path, sample_path))
    time.sleep(3)
    status, body, _ = get(f"http://127.0.0.1:{p.side.web.port}/api/cameras")
    snap = json.loads(body)
    assert status == 200 and sorted(snap["cameras"]) == ["campus", "street"]
    assert snap["live_view"]["viewers"] == 0 and snap["live_view"]["encoded"] == 0  # nobody watched: nothing made
    status, body, _ = get(f"http://127.0.0.1:{p.side.web.port}/metrics")
    assert status == 200 and b'pipeline_camera_frames_processed_total{camera="campus"}' in body
    status, jpeg, headers = get(f"http://127.0.0.1:{p.side.web.port}/frame/street.jpg")
    assert status == 200 and jpeg[:2] == b"\xff\xd8" and float(headers["X-Capture-Time"]) > 0
    assert get(f"http://127.0.0.1:{p.side.web.port}/frame/nope.jpg")[0] == 404


def test_a_token_guards_the_page_the_api_and_the_video(model_path, sample_path, running):
    p = running(live_config(model_path, sample_path, token="s3cret"))
    base = f"http://127.0.0.1:{p.side.web.port}"
    for path in ("/", "/api/cameras", "/metrics", "/frame/campus.jpg"):
        assert get(base + path)[0] == 401, path
    assert get(base + "/api/cameras", {"Authorization": "Bearer s3cret"})[0] == 200
    assert get(base + "/api/cameras", {"Authorization": "Bearer wrong"})[0] == 401
    status, _, headers = get(base + "/?token=s3cret")
    assert status == 200 and "pipeline_token=s3cret" in headers["Set-Cookie"]  # the page's videos use the cookie
    assert get(base + "/api/cameras", {"Cookie": "pipeline_token=s3cret"})[0] == 200


def test_the_server_listens_on_this_machine_only_by_default(model_path, sample_path, running):
    p = running(live_config(model_path, sample_path))
    assert p.side.web._httpd.server_address[0] == "127.0.0.1"
