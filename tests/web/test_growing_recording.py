"""A recording still being written, played on the page in headless Chromium: a real run
of a camera in real time, recorded in segments far longer than the test, with a line whose
crossings are events; an event's `play the recording` opens the segment being written
while it grows. The file is served up to its last whole fragment when asked, so the player
must follow it (ask again from where it is) and fetch the boxes of the new pictures, which
the JSON lines receive after the pictures reach the recording."""
from __future__ import annotations

import json

from conftest import detector_model
from web_support import browser, get, play_event_recording, running, wait_for  # noqa: F401  (a fixture)

VIDEO = "const v = document.querySelector('#player video');"
LINE = {"name": "path", "points": [[0, 300], [767, 250]], "classes": ["person"]}


def test_play_the_recording_of_a_fresh_event_follows_the_growing_segment_and_draws_its_new_boxes(
        model_path, sample_path, running):
    """The player stopped at the end of what was served when it opened (the segment's first
    seconds) and drew no box past it."""
    p = running({"sources": [{"id": "campus", "uri": sample_path("vtest.mp4"), "realtime": True, "max_fps": 5}],
                 "models": {"det": detector_model(model_path, score_threshold=0.2)},
                 "graph": [{"detect": {"model": "det"}}, "track", {"analytics": {"cameras": {"campus": {
                     "lines": [LINE]}}}}],
                 "outputs": {"video": {"enabled": False}, "store": False, "record": {"enabled": True, "segment_s": 600},
                             "web": {"port": 0}}})
    base = f"http://127.0.0.1:{p.side.web.port}"
    event = wait_for(lambda: next((e for e in json.loads(get(base + "/api/events")[1])["events"]
                                   if e.get("recording")), None), 60)
    assert event, "a person crossed the line while recording"
    d = browser()
    try:
        play_event_recording(d, base, event["id"])
        opened = wait_for(lambda: d.execute_script(VIDEO + "return v.readyState >= 1 && v.duration"), 20)
        # past the end of what was served when it opened, with the boxes of the picture shown there
        beyond = wait_for(lambda: d.execute_script(
            VIDEO + "const f = player.frames.find((f) => f.seq === player.shown);"
            "return v.currentTime > arguments[0] + 2 && f && f.t > arguments[0] && player.drawn > 0 && "
            "{t: v.currentTime, row: f.t, drawn: player.drawn, src: v.currentSrc, error: v.error && v.error.code}",
            opened), 60)
        stuck = d.execute_script(VIDEO + "return {t: v.currentTime, duration: v.duration, ended: v.ended, "
                                 "frames: player.frames.length, last: player.frames.length && player.frames.at(-1).t}")
    finally:
        d.quit()
    assert opened, "the recording opened"
    assert beyond, (opened, stuck)
    assert beyond["error"] is None and beyond["src"].split("?")[0] == f"{base}/recordings/{event['recording']}"
    frames = json.loads(get(f"{base}/api/boxes?recording={event['recording']}&from={beyond['row'] - 0.01}"
                            f"&to={beyond['row'] + 0.01}")[1])["frames"]
    assert frames and len(frames[0]["detections"]) == beyond["drawn"]  # the row of that picture, all its boxes
