"""The review page's timeline (`/review`) in headless Chromium over a store holding more
events in its range than a few pages of the API: thousands of events and recorded
segments written through the store's schema (a long run would take hours to make them),
served by the page's server. Every event of the range is on the timeline (a tick per
pixel column, with how many it holds), or the page says plainly how many it leaves out;
the bars of seconds with objects and with motion are both in sight."""
from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from pipeline.config.outputs import WebConfig
from pipeline.metrics.snapshot import Snapshot
from pipeline.sinks.preview import Preview
from pipeline.store.queries import Store
from pipeline.web.server import WebServer
from store_rows import T0, make_store
from web_support import browser, wait_for

CAMERAS = ("north gate", "yard-2")
AFTER, BEFORE = T0 + 7 * 3600, T0 + 10 * 3600 + 1234  # the page's range


def busy_store(seed: int = 11) -> tuple[dict, int]:
    """Events over the range (a few thousand, a random number, some outside it) and each
    camera's segments of 10 min with seconds of motion and objects, some with more seconds
    of objects than of motion; the events in the range."""
    rng = random.Random(seed)
    events, inside = [], 0
    for i in range(1, rng.randrange(6000, 9000)):
        t = rng.uniform(AFTER - 600, BEFORE + 600)
        inside += AFTER <= t < BEFORE
        events.append((i, 1, rng.choice(CAMERAS), t, "cross", i, rng.choice(("person", "car")), "street", None, "in"))
    segments = []
    for camera in CAMERAS:
        for k, start in enumerate(range(int(AFTER) - 300, int(BEFORE), 600)):
            motion = rng.uniform(50, 300)
            objects = motion * (1.5 if k % 2 else 0.5)  # objects without motion: a still parked car
            segments.append((camera, f"rec/{camera}/{start}.mp4", start, start + 600, 1000, motion, min(objects, 600)))
    tracks = [(i, 1, CAMERAS[0], i, cls, AFTER + i, AFTER + i + 9, 0.5, "[1, 2, 3, 4]", AFTER + i, "{}", "[]",
               '["street"]', None, None, None) for i, cls in enumerate(("person", "car"), 1)]  # the classes known
    data = {"tracks": tracks, "zones": [], "lines": [], "events": events, "counts": Counter(), "segments": segments}
    return data, inside


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    data, inside = busy_store()
    store = Store(make_store(str(tmp_path_factory.mktemp("busy") / "store.db"), data))
    preview = Preview()
    server = WebServer(WebConfig(port=0), Snapshot, preview, cameras=lambda: list(CAMERAS), store=store)
    server.start()
    d = browser()
    try:
        yield d, f"http://127.0.0.1:{server.port}/review?after={AFTER}&before={BEFORE}", data, inside
    finally:
        d.quit()
        server.close()
        preview.close()
        store.close()


def loaded(d) -> str:
    said = wait_for(lambda: d.execute_script("const s = document.getElementById('status');"
                                             "return !s.textContent.startsWith('loading') && s.textContent"), 60)
    assert said and not d.execute_script("return document.getElementById('status').classList.contains('error')"), said
    return said


def marks(d) -> dict:
    return d.execute_script("""const out = {};
        for (const g of document.querySelectorAll('#timeline g.row')) {
          out[g.dataset.camera] = [...g.querySelectorAll('line.mark')].reduce((a, m) => a + Number(m.dataset.n || 1), 0);
        }
        return out""")


def note(d) -> tuple[str, bool]:
    text, cut = d.execute_script("const n = document.getElementById('timeline-note');"
                                 "return n ? [n.textContent, n.classList.contains('cut')] : ['', false]")
    return re.sub(r"(?<=\d)[,.\u202f\u00a0 ](?=\d{3})", "", text), cut  # the browser's thousands apart


def test_every_event_of_a_busy_range_is_on_the_timeline_and_counted(page):
    d, url, data, inside = page
    d.get(url)
    loaded(d)
    drawn = marks(d)
    ticks = d.execute_script("return document.querySelectorAll('#timeline line.mark').length")
    text, cut = note(d)
    per_camera = Counter(e[2] for e in data["events"] if AFTER <= e[3] < BEFORE)
    assert inside > 5000 and drawn == dict(per_camera), (drawn, per_camera)
    assert ticks < inside  # many share a pixel column: one tick each, with their number
    assert f"{inside} events" in text and not cut, text


def test_a_range_with_more_events_than_the_page_reads_says_how_many_it_leaves_out(page):
    d, url, data, inside = page
    d.get(url)
    loaded(d)
    d.execute_script("view.eventPages = 2; load()")
    loaded(d)
    drawn, (text, cut) = sum(marks(d).values()), note(d)
    assert drawn == 2000 and cut and f"the newest 2000 events are drawn; {inside - 2000} older events" in text, text
    d.execute_script("document.getElementById('class').value = 'car'; view.eventPages = 1; load()")
    loaded(d)
    drawn, (text, cut) = sum(marks(d).values()), note(d)
    cars = sum(1 for e in data["events"] if AFTER <= e[3] < BEFORE and e[6] == "car")
    assert cars > 1000 and drawn == 1000 and cut, (cars, drawn)
    assert "the newest 1000 events are drawn; older events (before" in text, text  # the store counts all classes


def test_the_motion_and_objects_bars_are_both_in_sight(page):
    d, url, data, inside = page
    d.get(url)
    loaded(d)
    bars = d.execute_script("""return [...document.querySelectorAll('#timeline rect.motion, #timeline rect.objects')]
        .map((r) => { const b = r.getBoundingClientRect();
                      return {kind: r.classList[0], height: b.height, seen: document.elementFromPoint(
                          b.x + b.width / 2, b.y + b.height / 2) === r}; })""")
    kinds = Counter(b["kind"] for b in bars)
    assert kinds["motion"] > 100 and kinds["objects"] > 100, kinds
    hidden = [b for b in bars if not b["seen"]]
    assert not hidden and all(b["height"] >= 2 for b in bars), hidden[:5]
