"""The live page's video tiles in headless Chromium (Debian's, which plays H.264 in MSE)
against the live socket's protocol, served by a stand-in (tests/support/live_fake.py): a
made clip whose object moves a known path, its packets remuxed to fMP4 and sent a
fragment per picture with each picture's record (its box, `t` its media time). The box
drawn for each picture presented is that picture's own (by media time); a socket that
closes is reopened and the tile plays on; where video cannot play the tile shows the
stills and says why."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from pipeline.drawing import class_color
from web_support import browser, outline_drawn, wait_for

pytest.importorskip("skimage.data", reason="scikit-image provides the photo moved in the synthetic clip")
from live_fake import HEVC_MAIN, FakeLive, fragment, jpeg, serve  # noqa: E402
from synthetic import Mover, picture, render  # noqa: E402

FPS, FRAMES, SIZE = 15, 60, (640, 360)
CODEC = ("libx264", {"crf": "28", "preset": "veryfast", "x264-params": "keyint=15:min-keyint=15:scenecut=0:bframes=0"})
TILE = "const el = document.querySelector('.tile[data-camera=\"lab\"]'), v = el && el.querySelector('video.live');"


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("live") / "walk.mp4")
    truth = render([Mover(picture("astronaut", 90), (0, 30), (520, 240))], path, frames=FRAMES, size=SIZE, fps=FPS,
                   codec=CODEC)
    return fragment(path), [boxes[0] for boxes in truth]


def fake_server(clip, **kw):
    (init, frags, codec), truth = clip
    fake = FakeLive(init, frags, codec, truth, SIZE, FPS, still=jpeg(SIZE), **kw)
    base, stop = serve(fake, "lab")
    return fake, base, stop


def test_each_presented_picture_is_drawn_with_its_own_frames_box_and_a_closed_socket_resumes(clip):
    """The records' boxes are in three times the video's pixels, as a sub-stream's are in its
    main stream's, which each record names (the socket's init names the video's own)."""
    fake, base, stop = fake_server(clip, close_after=25, box_scale=3)  # the first socket closes mid-clip
    d = browser()
    try:
        d.get(base + "/")
        played = wait_for(lambda: d.execute_script(TILE + "return v && !v.hidden && v.currentTime > 3.6"), 60)
        # held on its picture: the page's watchdog resumes a paused video, so its play is made to do nothing
        d.execute_script(TILE + "v.play = () => Promise.resolve(); v.pause()")
        wait_for(lambda: False, 0.5)
        state = d.execute_script(TILE + """const o = el.live.overlay, q = v.getVideoPlaybackQuality(),
            r = el.querySelector('canvas.boxes').getBoundingClientRect();
            return {log: o.log, stats: o.stats(), quality: q.totalVideoFrames - q.droppedVideoFrames,
                    canvas: r.toJSON(), video: v.getBoundingClientRect().toJSON(), said: el.querySelector('.mode').textContent,
                    img: el.querySelector('img.video').hidden}""")
        shot = cv2.cvtColor(cv2.imdecode(np.frombuffer(d.get_screenshot_as_png(), np.uint8), cv2.IMREAD_COLOR),
                            cv2.COLOR_BGR2RGB)
    finally:
        d.quit()
        stop()
    assert played and fake.sockets == 2, "the tile reopened its socket and played on"
    log = state["log"]
    pictures = [(round(t * FPS), seq) for t, seq in log]
    wrong = [(i, seq) for i, seq in pictures if seq is not None and seq != i]
    assert not wrong, f"boxes of another picture drawn: {wrong[:5]}"
    assert min(i for i, _ in pictures) < 25 < 45 < max(i for i, _ in pictures), "pictures of both sockets shown"
    assert state["stats"]["withBoxes"] >= 0.9 * len(log) and state["stats"]["presented"] == len(log)
    assert state["quality"] >= len({i for i, _ in pictures if i >= 15}) > 20  # presented, by the video's own count
    assert state["said"] == "video · 0.5 s behind live" and state["img"]
    # the last picture's box, on the picture's area (640x360 in a wider element: scaled, not stretched)
    seq = log[-1][1]
    r = state["canvas"]
    k = r["width"] / SIZE[0]
    assert abs(r["height"] - SIZE[1] * k) < 1 and r["y"] >= state["video"]["y"] - 0.5
    x1, y1, x2, y2 = fake.truth[seq]
    b, g, red = class_color(0)
    assert outline_drawn(shot, (r["x"] + x1 * k, r["y"] + y1 * k, r["x"] + x2 * k, r["y"] + y2 * k), (red, g, b)) > 0.8


@pytest.mark.parametrize("mode, why", [("hevc", "stills: this browser cannot play hevc"),
                                       ("unavailable", "stills: the camera is decoded only"),
                                       ("refused", "stills: the server refused live video")])
def test_a_tile_that_cannot_play_video_shows_the_stills_and_says_why(clip, mode, why):
    """A reason that may pass (not the codec) is tried again with backoff: the tile keeps
    saying why it is on stills while it tries, never "connecting" at each try."""
    fake, base, stop = fake_server(clip, mode=mode)
    d = browser()
    try:
        d.get(base + "/")
        state = wait_for(lambda: d.execute_script(TILE + """const img = el && el.querySelector('img.video');
            return img && img.naturalWidth > 0 && {said: el.querySelector('.mode').textContent, video: v.hidden,
                                                    img: img.hidden}"""), 30)
        if mode != "hevc":
            d.execute_script(TILE + """const m = el.querySelector('.mode'); window.said = [];
                new MutationObserver(() => window.said.push(m.textContent)).observe(m, {childList: true,
                                                                                     characterData: true})""")
            tries = d.execute_script(TILE + "return el.live.tries")
            wait_for(lambda: d.execute_script(TILE + "return el.live.tries") >= tries + 2, 30)  # two more tries failed
            said = d.execute_script("return window.said")
    finally:
        d.quit()
        stop()
    assert state == {"said": why, "video": True, "img": False}
    if mode != "hevc":
        assert said and set(said) == {why}, said


def test_full_size_plays_the_sub_stream_and_says_why_where_the_main_stream_cannot_play(clip):
    """A camera whose main stream is HEVC (the common case: H.265 main, H.264 sub) opened
    full size plays its sub-stream's video, saying why, not the stills."""
    fake, base, stop = fake_server(clip, mode="main-hevc")
    d = browser()
    try:
        d.get(base + "/")
        wait_for(lambda: d.execute_script(TILE + "return v && !v.hidden && v.currentTime > 0.5"), 60)
        d.execute_script(TILE + "el.querySelector('.full-size').click()")
        said = wait_for(lambda: d.execute_script(TILE + """const t = el.querySelector('.mode').textContent;
            return el.classList.contains('full') && !v.hidden && t.includes('sub-stream (') && t"""), 30)
        at = d.execute_script(TILE + "return v.currentTime")
        moved = wait_for(lambda: d.execute_script(TILE + "return v.currentTime") > at + 0.5, 30)
    finally:
        d.quit()
        stop()
    assert said == f"video · 0.5 s behind live · sub-stream (main stream: {HEVC_MAIN})"
    assert moved and fake.streams[:3] == ["sub", "main", "sub"]
