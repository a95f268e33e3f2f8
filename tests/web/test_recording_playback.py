"""A recording played on the page in headless Chromium (Debian's, which decodes H.264):
a real run records a made clip in segments with the page on; the camera's `recordings`
button lists them, a later one plays, and the boxes of the JSON lines rows that point into
it (in an hourly JSON lines file, as a live camera's) are drawn over the picture the video
shows; an event's `play the recording` opens its recording at its time.
`PIPELINE_SCREENSHOTS=docs` writes the player to `docs/recording_playback.png`."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from conftest import detector_model
from pipeline.drawing import class_color
from web_support import browser, get, play_event_recording, outline_drawn, running, wait_for  # noqa: F401  (a fixture)

pytest.importorskip("skimage.data", reason="scikit-image provides the photo moved in the synthetic clip")
from synthetic import Mover, picture, render  # noqa: E402

FPS, FRAMES, SIZE = 10, 60, (640, 360)
KEYFRAMES = ("libx264", {"crf": "20", "preset": "veryfast", "x264-params": "keyint=10:min-keyint=10:scenecut=0"})
VIDEO = "const v = document.querySelector('#player video');"


def shown_frame(recording: Path, picture_shown: np.ndarray) -> float:
    """The time, in the recording's clock, of its picture nearest to what the page shows
    (the top two thirds: the player's controls cover the bottom when paused)."""
    h, w = picture_shown.shape[:2]
    best = (float("inf"), 0.0)
    with av.open(str(recording)) as f:
        for frame in f.decode(video=0):
            image = cv2.resize(frame.to_ndarray(format="rgb24"), (w, h), interpolation=cv2.INTER_AREA)
            diff = np.abs(image[:h * 2 // 3].astype(int) - picture_shown[:h * 2 // 3].astype(int)).mean()
            best = min(best, (diff, float(frame.time)))
    return best[1]


def recorded_walk(model_path, running, tmp_path, graph: list):
    """A run that records a person walking across, in segments of 2 s, its JSON lines cut
    hourly (one file for all the segments, stamped before the later ones), the page on:
    the pipeline (ended, its page still served) and the JSON lines rows."""
    clip = str(tmp_path / "walk.mp4")
    render([Mover(picture("astronaut", 160), (-40, 40), (520, 40))], clip, frames=FRAMES, size=SIZE, fps=FPS,
           codec=KEYFRAMES)
    p = running({"sources": [{"id": "lab", "uri": clip}], "models": {"det": detector_model(model_path)},
                 "graph": [{"detect": {"model": "det"}}, "track", *graph],
                 "outputs": {"video": {"enabled": False, "segment_s": 3600},
                             "record": {"enabled": True, "segment_s": 2}, "web": {"port": 0}}})
    assert p.wait(120), "the run did not end"
    jsonl = sorted((tmp_path / "out").glob("detections.*.jsonl"))
    assert len(jsonl) == 1  # hourly
    return p, [json.loads(line) for line in jsonl[0].read_text().splitlines()]


def test_a_later_recording_segment_plays_on_the_page_with_the_boxes_of_the_picture_shown(model_path, running,
                                                                                         tmp_path):
    """The third segment on answered no boxes where the JSON lines file was stamped before
    its predecessor (an hourly one)."""
    p, rows = recorded_walk(model_path, running, tmp_path, [])
    out = tmp_path / "out"
    d = browser()
    try:
        d.get(f"http://127.0.0.1:{p.side.web.port}/")
        button = wait_for(lambda: next(iter(b for b in d.find_elements("css selector", '.tile[data-camera="lab"] '
                                                                      'button.recordings') if b.is_displayed()), None))
        assert button, "no recordings button on the camera's tile"
        button.click()
        segments = wait_for(lambda: d.find_elements("css selector", "#segment-list button[data-file]"))
        assert segments, "no segments listed"
        files = [b.get_attribute("data-file") for b in segments]
        newest = files[0]
        segments[0].click()
        playing = wait_for(lambda: d.execute_script(VIDEO + "return !v.paused && v.readyState >= 2 "
                                                    "&& v.currentTime > 0.3 && v.currentTime"), 20)
        time.sleep(0.4)
        later = d.execute_script(VIDEO + "return v.currentTime")
        d.execute_script(VIDEO + "v.pause()")
        time.sleep(0.5)  # the frame callback of the last picture has drawn its boxes
        state = d.execute_script(VIDEO + "return {rect: v.getBoundingClientRect().toJSON(), w: v.videoWidth, "
                                 "h: v.videoHeight, error: v.error && v.error.code, drawn: player.drawn}")
        shot = cv2.cvtColor(cv2.imdecode(np.frombuffer(d.get_screenshot_as_png(), np.uint8), cv2.IMREAD_COLOR),
                            cv2.COLOR_BGR2RGB)
    finally:
        d.quit()
    cv2.imwrite(str(tmp_path / "recording_playback.png"), cv2.cvtColor(shot, cv2.COLOR_RGB2BGR))
    if os.environ.get("PIPELINE_SCREENSHOTS"):
        folder = Path(os.environ["PIPELINE_SCREENSHOTS"])
        folder.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(folder / "recording_playback.png"), cv2.cvtColor(shot, cv2.COLOR_RGB2BGR))
    assert sorted(files, reverse=True) == files and len(files) == 3  # three segments of 2 s, newest first
    assert playing and later > playing and state["error"] is None  # decoded and playing
    # the picture shown, as the element fits it, and the row of that picture
    r, k = state["rect"], min(state["rect"]["width"] / state["w"], state["rect"]["height"] / state["h"])
    left, top = r["x"] + (r["width"] - state["w"] * k) / 2, r["y"] + (r["height"] - state["h"] * k) / 2
    shown = shot[round(top):round(top + state["h"] * k), round(left):round(left + state["w"] * k)]
    t = shown_frame(out / newest, shown)
    row = next(x for x in rows if x["recording"] == newest and abs(x["recording_time"] - t) < 0.5 / FPS)
    people = [x for x in row["detections"] if x["class"] == "person"]
    assert people and state["drawn"] == len(row["detections"])
    b, g, red = class_color(0)
    for person in people:
        x1, y1, x2, y2 = person["box"]
        on_screen = (left + x1 * k, top + y1 * k, left + x2 * k, top + y2 * k)
        assert outline_drawn(shot, on_screen, (red, g, b)) > 0.8, (row["seq"], t, person["box"])


def test_an_events_play_the_recording_button_opens_its_recording_at_the_events_time(model_path, running, tmp_path):
    """Events carried no `recording`: the button never showed."""
    line = {"name": "middle", "points": [[320, 0], [320, 359]], "classes": ["person"]}
    p, rows = recorded_walk(model_path, running, tmp_path, [{"analytics": {"cameras": {"lab": {"lines": [line]}}}}])
    base = f"http://127.0.0.1:{p.side.web.port}"
    events = json.loads(get(base + "/api/events")[1])["events"]
    assert events, "the walk crosses the line"
    event = events[-1]  # the first of the run
    row = next(r for r in rows if r["seq"] == event["seq"])
    assert (event["recording"], event["recording_time"]) == (row["recording"], row["recording_time"])
    d = browser()
    try:
        play_event_recording(d, base, event["id"])
        state = wait_for(lambda: d.execute_script(
            VIDEO + "return document.getElementById('player').open && v.readyState >= 2 && !v.seeking "
            "&& {src: v.currentSrc, t: v.currentTime, error: v.error && v.error.code}"), 20)
    finally:
        d.quit()
    assert state and state["error"] is None and state["src"] == f"{base}/recordings/{event['recording']}"
    at = max(0.0, event["recording_time"] - 2)  # the page starts two seconds before the event
    assert at <= state["t"] < at + 1.0, (state, event["recording_time"])
