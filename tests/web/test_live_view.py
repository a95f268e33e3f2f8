"""The live web view in a real browser (Debian's headless Chromium, installed by .ci/run):
both camera tiles with boxes, video that moves, counts and states in the page's DOM;
the API and metrics on the same port; the token; no work while nobody watches.
`PIPELINE_SCREENSHOTS=docs` writes the page of the first test to `docs/live_view.png`."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from pipeline.drawing import class_color
from web_support import SHOWN, browser, get, live_config, running, wait_for  # noqa: F401  (a fixture)


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

    rects = {cam: d.execute_script(SHOWN + "return shown(arguments[0]).getBoundingClientRect().toJSON()", t)
             for cam, t in tiles.items()}
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
            shown = d.find_elements(By.CSS_SELECTOR, ".tile")
            if len(shown) == 2 and all(d.execute_script(SHOWN + "return playing(shown(arguments[0]))", t)
                                       for t in shown):
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
    assert p.side.web.address[0] == "127.0.0.1"


def tile_text(d, camera: str, selector: str) -> str:
    return d.execute_script("const e = document.querySelector(`.tile[data-camera='${arguments[0]}'] ${arguments[1]}`);"
                            "return e && !e.closest('[hidden]') ? e.textContent : null", camera, selector)


# the P99 chart's label band (its top 16 rows): pixels of the chart's line colour in it
LINE_IN_LABEL = """
const c = document.querySelector(`.tile[data-camera='${arguments[0]}'] canvas.chart`);
const px = c.getContext("2d").getImageData(0, 0, c.width, 16).data;
let n = 0;
for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 128 && px[i + 2] > 200 && px[i] < 120) n++;
return n;
"""


@pytest.mark.rtsp
def test_an_outage_shows_zero_recent_fps_growing_downtime_and_the_last_pictures_time(model_path, sample_path,
                                                                                     running, tmp_path):
    """An RTSP camera whose server is killed while the page watches it and a file camera:
    the tile says `reconnecting`, its recent fps (last 10 s) falls to 0 (a lifetime average
    read 27 fps beside "reconnecting"), the grey frozen picture says when it was taken,
    `downtime_s` grows while it lasts (it froze), and the other camera goes on. The page's
    tiles count as viewers (`live_view.viewers` read 0). `PIPELINE_SCREENSHOTS=docs` writes
    the page during the outage to `docs/live_outage.png`."""
    import cv2

    sys.path.insert(0, str(ROOT / "tests" / "sources"))  # the RTSP test server of the live-camera tests
    from test_rtsp import _MISSING, RtspServer
    if _MISSING:
        pytest.skip(_MISSING)
    server = RtspServer("--pattern", "ball", "--size", "320x240", "--fps", "10").start()
    cfg = live_config(model_path, sample_path)
    cfg["sources"] = [{"id": "door", "uri": server.url, "open_timeout_s": 1, "read_timeout_s": 1,
                       "reconnect": {"initial_s": 0.5, "max_s": 1, "give_up_s": 0}}, cfg["sources"][1]]
    cfg["graph"] = [{"detect": {"model": "det"}}, "annotate"]
    cfg["outputs"].update(video={"enabled": False}, jsonl={"enabled": False})
    p = running(cfg)
    api = f"http://127.0.0.1:{p.side.web.port}/api/cameras"
    d = browser()
    try:
        d.get(f"http://127.0.0.1:{p.side.web.port}/")
        assert wait_for(lambda: tile_text(d, "door", ".state") == "streaming"
                        and d.execute_script(SHOWN + "return playing(shown(document.querySelector("
                                             "\".tile[data-camera='door']\")))"), 60)
        live = wait_for(lambda: len((v := json.loads(get(api)[1])["live_view"])["video"]) == 2 and v, 10)
        # the tile's figure comes with the page's next poll of /api/cameras (each second)
        streaming_fps = wait_for(lambda: float(tile_text(d, "door", ".fps") or 0), 10) or 0.0
        server.kill()
        killed = time.time()
        assert wait_for(lambda: tile_text(d, "door", ".state") == "reconnecting", 20)
        assert wait_for(lambda: tile_text(d, "door", ".fps") == "0.0", 20)  # 10 s after the last frame
        outage = tile_text(d, "door", ".outage")
        shown_at = float(d.execute_script("return document.querySelector(\".tile[data-camera='door']\")"
                                          ".dataset.captured"))
        said = d.execute_script("return new Date(arguments[0] * 1000).toLocaleTimeString()", shown_at)
        first = json.loads(get(api)[1])
        time.sleep(2)
        second = json.loads(get(api)[1])
        street = tile_text(d, "street", ".state"), float(tile_text(d, "street", ".fps")), \
            tile_text(d, "street", ".outage")
        header, window = d.find_element("id", "total").text, tile_text(d, "door", ".window")
        line_in_label = d.execute_script(LINE_IN_LABEL, "street")
        shot = cv2.imdecode(np.frombuffer(d.get_screenshot_as_png(), np.uint8), cv2.IMREAD_COLOR)
        cv2.imwrite(str(tmp_path / "live_outage.png"), shot)
        if os.environ.get("PIPELINE_SCREENSHOTS"):
            folder = Path(os.environ["PIPELINE_SCREENSHOTS"])
            folder.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(folder / "live_outage.png"), shot)
    finally:
        d.quit()
        server.kill()
    assert live and sorted(live["video"]) == ["door", "street"]  # the page's two tiles play their video
    assert streaming_fps > 0 and window == "last 10 s:" and header.startswith("last 10 s: ")
    assert outage == f"reconnecting: last picture at {said}"
    assert killed - 5 < shown_at < killed + 1  # the picture it names is the last before the outage
    door = second["cameras"]["door"]
    assert door["recent"]["fps"] == 0 and door["fps"] > 0  # now 0; the run's average keeps its frames
    assert door["downtime_s"] >= first["cameras"]["door"]["downtime_s"] + 1.5  # it grows while down
    assert street[0] == "streaming" and street[1] > 0 and street[2] is None  # the other camera goes on
    assert line_in_label == 0  # the chart's line stays below its label


def test_a_graph_without_annotate_says_its_pictures_have_no_boxes(model_path, sample_path, running):
    """Bare tiles with no word: the page says there is no annotate stage; with one, it says nothing."""
    from selenium.webdriver.common.by import By

    cfg = live_config(model_path, sample_path)
    cfg["graph"] = [{"detect": {"model": "det"}}]
    cfg["outputs"].update(video={"enabled": False}, jsonl={"enabled": False})
    p = running(cfg)
    assert json.loads(get(f"http://127.0.0.1:{p.side.web.port}/api/cameras")[1])["live_view"]["annotated"] is False
    d = browser()
    try:
        d.get(f"http://127.0.0.1:{p.side.web.port}/")
        tiles = lambda: d.find_elements(By.CSS_SELECTOR, ".tile")  # noqa: E731
        notes = wait_for(lambda: len(tiles()) == 2 and [n.text for t in tiles()
                                                        for n in t.find_elements(By.CSS_SELECTOR, ".no-boxes")
                                                        if n.is_displayed()], 30)
    finally:
        d.quit()
    assert notes == ["no annotate stage: pictures without boxes"] * 2
