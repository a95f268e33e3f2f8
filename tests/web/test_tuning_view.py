"""The tuning view: a camera's motion boxes, mask and regions in frame pixels over HTTP,
drawn over its picture in a real browser when its tile's `motion` box is ticked."""
from __future__ import annotations

import json
import time

import numpy as np

from conftest import detector_model
from web_support import SHOWN, browser, get, running  # noqa: F401  (a fixture)

MASK = [[0, 0], [384, 0], [384, 288], [0, 288]]  # the campus clip's top-left quarter


def tuning_config(model_path, sample_path) -> dict:
    return {"sources": [{"id": "campus", "uri": sample_path("vtest.mp4"), "realtime": True, "loop": True,
                         "motion": {"mask": [MASK]}},
                        {"id": "street", "uri": sample_path("bikes.mp4"), "realtime": True, "loop": True}],
            "models": {"det": detector_model(model_path)},
            "graph": [{"detect": {"model": "det", "fps": 5, "cameras": {"campus": {"motion": True}}}}, "annotate"],
            "outputs": {"video": {"enabled": False}, "jsonl": {"enabled": False}, "web": {"port": 0}}}


def motion_of(port: int, camera: str, deadline_s: float = 20) -> tuple[int, dict | bytes]:
    deadline = time.monotonic() + deadline_s
    while True:
        status, body, _ = get(f"http://127.0.0.1:{port}/api/motion/{camera}")
        if status == 200:
            view = json.loads(body)
            if view["boxes"] or time.monotonic() > deadline:
                return status, view
        elif time.monotonic() > deadline:
            return status, body
        time.sleep(0.2)


def test_the_api_gives_a_cameras_motion_mask_and_the_detectors_reason(model_path, sample_path, running):
    p = running(tuning_config(model_path, sample_path))
    port = p.side.web.port
    status, view = motion_of(port, "campus")
    assert status == 200 and (view["width"], view["height"]) == (768, 576)
    assert view["mask"] == [MASK] and view["boxes"]
    assert all(not (b[2] <= 384 and b[3] <= 288) for b in view["boxes"])  # nothing wholly under the mask
    assert view["reason"] in ("first", "motion", "refresh", "still")
    assert get(f"http://127.0.0.1:{port}/api/motion/street")[0] == 404  # it measures no motion
    assert json.loads(get(f"http://127.0.0.1:{port}/api/cameras")[1])["live_view"]["motion"] == ["campus"]
    assert get(f"http://127.0.0.1:{port}/api/motion/nope")[0] == 404


def test_ticking_motion_draws_the_boxes_and_the_mask_and_only_a_camera_measuring_motion_offers_it(
        model_path, sample_path, running, tmp_path):
    """A camera that measures no motion has no `motion` switch (it drew a huge clipped
    "no motion measured" over its picture and polled a 404 every second)."""
    import cv2
    from selenium.webdriver.common.by import By

    p = running(tuning_config(model_path, sample_path))
    assert motion_of(p.side.web.port, "campus")[0] == 200
    d = browser()
    try:
        d.get(f"http://127.0.0.1:{p.side.web.port}/")
        deadline = time.monotonic() + 30
        while not (d.find_elements(By.CSS_SELECTOR, '.tile[data-camera="campus"]') and d.execute_script(
                SHOWN + "return playing(shown(document.querySelector('.tile[data-camera=\"campus\"]')))")) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        tile = d.find_element(By.CSS_SELECTOR, '.tile[data-camera="campus"]')
        time.sleep(1.0)
        offered = {t.get_attribute("data-camera"): t.find_element(By.CSS_SELECTOR, ".tuning").is_displayed()
                   for t in d.find_elements(By.CSS_SELECTOR, ".tile")}
        before = picture_of(d, tile)
        tile.find_element(By.CSS_SELECTOR, ".show-motion").click()  # the tile turns to stills, the motion over them
        time.sleep(2.0)  # a few polls of the view
        after = picture_of(d, tile)
        cv2.imwrite(str(tmp_path / "tuning_view.png"), after)
    finally:
        d.quit()
    assert offered == {"campus": True, "street": False}
    assert magenta(after) > 50 > magenta(before)  # the motion boxes
    # the mask's grey veil over the top-left quarter (a still building): flatter than without it
    h, w = after.shape[:2]
    quarter = lambda picture: picture[: h // 2 - 4, : w // 2 - 4].astype(float).std()  # noqa: E731
    assert quarter(after) < 0.8 * quarter(before), (quarter(after), quarter(before))


def picture_of(d, tile) -> np.ndarray:
    """The tile's picture as the screen shows it (BGR): its video, or its stills."""
    import cv2

    rect = d.execute_script(SHOWN + "return shown(arguments[0]).getBoundingClientRect().toJSON()", tile)
    shot = cv2.imdecode(np.frombuffer(d.get_screenshot_as_png(), np.uint8), cv2.IMREAD_COLOR)
    x, y, w, h = (int(rect[k]) for k in ("x", "y", "width", "height"))
    return shot[y:y + h, x:x + w]


def magenta(picture: np.ndarray) -> int:
    return int((np.abs(picture.astype(int) - np.array([255, 0, 255])).sum(axis=2) < 30).sum())
