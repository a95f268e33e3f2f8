"""A camera that cannot be reached, on the live page in a real browser (Debian's headless
Chromium): its tile counts the attempts that failed since its last frame as they happen,
fed by `/api/cameras` (its `reconnects` count only returns, and read 0 all along)."""
from __future__ import annotations

import json

from brokers import free_port
from web_support import browser, get, live_config, running, wait_for  # noqa: F401  (a fixture)

TILE = "const e = document.querySelector(`.tile[data-camera='${arguments[0]}'] ${arguments[1]}`);" \
       "return e && !e.closest('[hidden]') ? e.textContent : null"


def test_the_tile_of_a_camera_that_cannot_be_reached_counts_its_attempts_while_it_tries(model_path, sample_path,
                                                                                      running):
    cfg = live_config(model_path, sample_path)
    cfg["sources"] = [{"id": "dock-3", "uri": f"rtsp://127.0.0.1:{free_port()}/cam", "open_timeout_s": 1,
                       "reconnect": {"initial_s": 0.2, "max_s": 0.4, "give_up_s": 0}}]
    cfg["graph"] = [{"detect": {"model": "det"}}]
    cfg["outputs"].update(video={"enabled": False}, jsonl={"enabled": False})
    p = running(cfg)
    api = f"http://127.0.0.1:{p.side.web.port}/api/cameras"
    d = browser()
    try:
        d.get(f"http://127.0.0.1:{p.side.web.port}/")
        first = wait_for(lambda: int(d.execute_script(TILE, "dock-3", ".attempts") or 0) >= 2
                         and int(d.execute_script(TILE, "dock-3", ".attempts")), 60)
        later = wait_for(lambda: (n := int(d.execute_script(TILE, "dock-3", ".attempts") or 0)) > first and n, 60)
        state = d.execute_script(TILE, "dock-3", ".state")
    finally:
        d.quit()
    camera = json.loads(get(api)[1])["cameras"]["dock-3"]
    assert first and later > first  # it counts up while it tries
    assert state == "connecting" and camera["state"] == "connecting"
    assert camera["attempts"] >= later and camera["reconnects"] == 0  # a return is still a reconnect
