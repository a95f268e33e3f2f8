"""The review page's moment view in headless Chromium over a real run of a 640x272 camera
(samples/bikes.mp4, recorded): the boxes of the picture shown are drawn over the picture's
area only, never past it into the element's bars or the caption under it."""
from __future__ import annotations

import json
import math
import urllib.parse

from conftest import detector_model
from web_support import browser, get, running, wait_for  # noqa: F401  (a fixture)

# The canvas's drawn pixels' bounds and the picture's area, in the page's CSS pixels.
DRAWN = """const p = view.players[0], v = p.video, c = p.canvas, r = c.getBoundingClientRect(),
  e = v.getBoundingClientRect(), k = Math.min(e.width / v.videoWidth, e.height / v.videoHeight);
const a = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, s = r.width / c.width;
let x1 = Infinity, y1 = Infinity, x2 = -Infinity, y2 = -Infinity;
for (let i = 3; i < a.length; i += 4) if (a[i]) {
  const x = (i >> 2) % c.width, y = Math.floor((i >> 2) / c.width);
  x1 = Math.min(x1, x); x2 = Math.max(x2, x + 1); y1 = Math.min(y1, y); y2 = Math.max(y2, y + 1);
}
const caption = v.closest('.stage').querySelector('.caption').getBoundingClientRect();
return {drawn: [r.x + x1 * s, r.y + y1 * s, r.x + x2 * s, r.y + y2 * s], boxes: p.drawn,
        picture: [e.x + (e.width - v.videoWidth * k) / 2, e.y + (e.height - v.videoHeight * k) / 2,
                  e.x + (e.width + v.videoWidth * k) / 2, e.y + (e.height + v.videoHeight * k) / 2],
        size: [v.videoWidth, v.videoHeight], caption: caption.y}"""


def test_a_640x272_cameras_boxes_in_the_moment_view_stay_inside_its_picture(model_path, sample_path, running):
    p = running({"sources": [{"id": "road", "uri": sample_path("bikes.mp4"), "stride": 2}],
                 "models": {"det": detector_model(model_path, score_threshold=0.25)},
                 "graph": [{"detect": {"model": "det"}}, "track"],
                 "outputs": {"video": {"enabled": False}, "record": {"enabled": True, "segment_s": 10},
                             "web": {"port": 0}}})
    assert p.wait(300), "the run did not end"
    p.side.store.close()  # its rows written before the page asks
    base = f"http://127.0.0.1:{p.side.web.port}"
    segment = json.loads(get(f"{base}/api/store/segments")[1])["segments"][0]
    d = browser(1320, 820)
    try:
        d.get(f"{base}/review?" + urllib.parse.urlencode({"after": math.floor(segment["start"]) - 1,
                                                          "before": math.ceil(segment["end"]) + 1}))
        assert wait_for(lambda: d.execute_script("return (view.segments.road || []).length"), 30), "on the timeline"
        d.execute_script("playMoment(arguments[0])", segment["start"] + 1)
        wait_for(lambda: d.execute_script("const p = view.players[0]; return p && p.video.readyState >= 2 && "
                                          "!p.video.seeking && p.frames.some((f) => f.detections.length)"), 30)
        # paused on the picture whose boxes reach lowest: the bottom edge is where they ran over
        d.execute_script("""const p = view.players[0], f = p.frames.filter((f) => f.detections.length).reduce(
            (a, b) => Math.max(...b.detections.map((x) => x.box[3])) > Math.max(...a.detections.map((x) => x.box[3]))
              ? b : a);
            p.video.pause(); p.video.currentTime = f.t;""")
        state = wait_for(lambda: d.execute_script("const p = view.players[0]; return !p.video.seeking && p.drawn && "
                                                  "(() => {" + DRAWN + "})()"), 10)
    finally:
        d.quit()
    assert state and state["size"] == [640, 272] and state["boxes"] > 0, state
    (x1, y1, x2, y2), (px1, py1, px2, py2) = state["drawn"], state["picture"]
    assert px1 - 0.5 <= x1 and px2 + 0.5 >= x2 and py1 - 0.5 <= y1 and py2 + 0.5 >= y2, state
    assert y2 <= state["caption"] + 0.5, state
