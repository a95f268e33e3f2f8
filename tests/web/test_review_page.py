"""The review page (`/review`) in headless Chromium (Debian's, which decodes H.264) over
the store of a real run: four file cameras made from the sample clips, recorded in
segments, with event snapshots, lines and zones, the store on (its default) and the page
behind a token. Every figure the page shows is checked against what the store's API
answers for the same range: the timeline's bars and event marks per camera, the tracks a
filter leaves, a track's recording played at its time with its box drawn, every camera
played at a moment chosen on the timeline, the counts charts' bars, the export's answer.
`PIPELINE_SCREENSHOTS=docs` writes `docs/review_day.png`, `docs/review_track.png` and
`docs/review_counts.png`."""
from __future__ import annotations

import json
import math
import os
import time
import urllib.parse
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from conftest import detector_model
from pipeline.drawing import class_color
from web_support import browser, get, outline_drawn, running, wait_for  # noqa: F401  (a fixture)

TOKEN = "review-token"
ZONE = "lawn <b>north</b>"  # a name with markup: the page shows it as text
CAMERAS = {"campus": ("vtest.mp4", 2), "gate": ("vtest.mp4", 3), "street": ("bikes.mp4", 1), "road": ("bikes.mp4", 2)}
LAWN = [[0, 330], [767, 280], [767, 575], [0, 575]]


def review_config(model_path, sample_path, out: Path) -> dict:
    return {"sources": [{"id": cam, "uri": sample_path(clip), "stride": stride} for cam, (clip, stride) in CAMERAS.items()],
            "models": {"det": detector_model(model_path, score_threshold=0.25)},
            "graph": [{"detect": {"model": "det"}}, "track", {"analytics": {"cameras": {
                "campus": {"lines": [{"name": "path", "points": [[0, 300], [767, 250]], "classes": ["person"]}],
                           "zones": [{"name": ZONE, "polygon": LAWN, "classes": ["person"]}]},
                "gate": {"zones": [{"name": "lawn", "polygon": LAWN}]},
                "street": {"lines": [{"name": "middle", "points": [[320, 0], [320, 271]]}]},
                "road": {"lines": [{"name": "middle", "points": [[320, 0], [320, 271]]}]}}}}],
            "outputs": {"dir": str(out), "video": {"enabled": False},
                        "record": {"enabled": True, "segment_s": 10}, "events": {"snapshots": True},
                        "web": {"port": 0, "token": TOKEN}}}


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory, model_path, sample_path):
    """The run, ended (its page and store still served), and its base URL."""
    from pipeline.config import load_config
    from pipeline.graph import Pipeline

    folder = tmp_path_factory.mktemp("review")
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(review_config(model_path, sample_path, folder / "out"), sort_keys=False))
    p = Pipeline(load_config(str(config)))
    p.start()
    try:
        assert p.wait(600), "the run did not end"
        p.side.store.close()  # its last rows written (every flush_s) before the page and the API are asked
        yield p, f"http://127.0.0.1:{p.side.web.port}"
    finally:
        p.stop(abort=True)
        p.close(timeout=10)


def api(base: str, path: str, **params) -> dict:
    status, body, _ = get(f"{base}/{path}?{urllib.parse.urlencode(params)}",
                          {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200, (path, params, body)
    return json.loads(body)


def every(base: str, path: str, key: str, **params) -> list[dict]:
    """All the rows of a paged query."""
    rows, cursor = [], None
    while True:
        page = api(base, path, **params, limit=1000, **({"cursor": cursor} if cursor else {}))
        rows += page[key]
        if not (cursor := page["next"]):
            return rows


def span(base: str) -> tuple[int, int]:
    """A range holding the whole run: its recordings' first start to last end."""
    segments = api(base, "api/store/segments", limit=10000)["segments"]
    assert {s["camera"] for s in segments} == set(CAMERAS), "every camera recorded"
    return math.floor(min(s["start"] for s in segments)) - 1, math.ceil(max(s["end"] for s in segments)) + 1


def busiest_moment(segments: list[dict]) -> float:
    """A moment the most cameras recorded (each camera's clock starts when the store first
    sees it, so the clips' starts differ by how long each waited for its first turn)."""
    moments = [s["start"] + 0.5 for s in segments]
    return max(moments, key=lambda t: (sum(s["start"] <= t < s["end"] for s in segments), -t))


def open_review(d, base: str, **params) -> None:
    """The page with `params` in its address, once it has loaded what they ask for."""
    d.get(f"{base}/review?{urllib.parse.urlencode({'token': TOKEN, **params})}")
    loaded = wait_for(lambda: d.execute_script("const s = document.getElementById('status');"
                                               "return !s.textContent.startsWith('loading') && s.textContent"), 30)
    error = d.execute_script("return document.getElementById('status').classList.contains('error')")
    assert loaded and not error, loaded


def screenshot(d, element=None) -> np.ndarray:
    png = element.screenshot_as_png if element is not None else d.get_screenshot_as_png()
    return cv2.cvtColor(cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def keep(shot: np.ndarray, tmp_path: Path, name: str) -> None:
    cv2.imwrite(str(tmp_path / name), cv2.cvtColor(shot, cv2.COLOR_RGB2BGR))
    if os.environ.get("PIPELINE_SCREENSHOTS"):
        folder = Path(os.environ["PIPELINE_SCREENSHOTS"])
        folder.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(folder / name), cv2.cvtColor(shot, cv2.COLOR_RGB2BGR))


def test_the_review_page_needs_the_token_as_the_live_page_does(reviewed):
    p, base = reviewed
    assert get(f"{base}/review")[0] == 401 and get(f"{base}/static/playback.js")[0] == 401
    status, body, headers = get(f"{base}/review?token={TOKEN}")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and b"<title>pipeline: review" in body
    assert headers["Set-Cookie"].startswith("pipeline_token=")
    status, body, headers = get(f"{base}/static/playback.js", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and headers["Content-Type"].startswith("text/javascript") and b"function makePlayer" in body


def test_the_timeline_shows_each_cameras_activity_as_bars_and_its_events_as_marks(reviewed):
    p, base = reviewed
    after, before = span(base)
    activity = api(base, "api/store/activity", after=after, before=before, bucket="minute")["cameras"]
    events = every(base, "api/store/events", "events", after=after, before=before)
    d = browser()
    try:
        open_review(d, base, after=after, before=before)
        rows = d.execute_script("""return [...document.querySelectorAll('#timeline g.row')].map((g) => ({
            camera: g.dataset.camera, name: g.querySelector('text.camera').textContent,
            objects: g.querySelectorAll('rect.objects').length, motion: g.querySelectorAll('rect.motion').length,
            recorded: g.querySelectorAll('rect.recorded').length,
            marks: [...g.querySelectorAll('line.mark')].reduce((a, m) => a + Number(m.dataset.n), 0)}))""")
        fetched = d.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
        segments = api(base, "api/store/segments", after=after, before=before, limit=10000)["segments"]
    finally:
        d.quit()
    assert fetched and all(url.startswith(base + "/") for url in fetched), fetched  # nothing from elsewhere
    assert sorted(r["camera"] for r in rows) == sorted(CAMERAS)
    for row in rows:
        buckets = activity.get(row["camera"], [])
        assert row["name"] == row["camera"]
        assert row["objects"] == sum(1 for b in buckets if b[2] > 0) > 0, (row, buckets)
        assert row["motion"] == sum(1 for b in buckets if b[1] > 0), (row, buckets)
        assert row["recorded"] == sum(1 for s in segments if s["camera"] == row["camera"]) > 0
        assert row["marks"] == sum(1 for e in events if e["camera"] == row["camera"])
    assert sum(r["marks"] for r in rows) > 0, "the run's lines and zones saw events"


def track_items(d) -> list[dict]:
    return d.execute_script("""return [...document.querySelectorAll('#track-list .track')].map((b) => ({
        id: Number(b.dataset.id), text: b.innerText, markup: b.querySelectorAll('.what *:not(div)').length}))""")


def test_a_filter_narrows_the_list_to_the_tracks_the_store_matches(reviewed):
    from selenium.webdriver.common.by import By

    p, base = reviewed
    after, before = span(base)
    everything = api(base, "api/store/tracks", after=after, before=before, limit=50)
    wanted = api(base, "api/store/tracks", after=after, before=before, limit=50, **{"class": "person", "zone": ZONE})
    d = browser()
    try:
        open_review(d, base, after=after, before=before)
        first = track_items(d)
        d.find_element(By.ID, "class").send_keys("person")
        d.find_element(By.ID, "zone").send_keys(ZONE)
        d.find_element(By.ID, "apply").click()
        narrowed = wait_for(lambda: (items := track_items(d)) != first and items, 20)
    finally:
        d.quit()
    assert [t["id"] for t in first] == [t["id"] for t in everything["tracks"]]
    assert wanted["tracks"] and [t["id"] for t in narrowed] == [t["id"] for t in wanted["tracks"]]
    assert len(narrowed) < len(first) or (everything["next"] and not wanted["next"])
    for item in narrowed:
        assert "person #" in item["text"] and f"zone {ZONE}" in item["text"] and item["markup"] == 0


def test_more_brings_the_next_page_of_tracks_by_the_cursor(reviewed):
    from selenium.webdriver.common.by import By

    p, base = reviewed
    after, before = span(base)
    first = api(base, "api/store/tracks", after=after, before=before, limit=50)
    assert first["next"], "the run has more than a page of tracks"
    second = api(base, "api/store/tracks", after=after, before=before, limit=50, cursor=first["next"])
    d = browser()
    try:
        open_review(d, base, after=after, before=before)
        d.find_element(By.ID, "more").click()
        shown = wait_for(lambda: (items := track_items(d)) and len(items) > 50 and items, 20)
        more = d.execute_script("return !document.getElementById('more').hidden")
    finally:
        d.quit()
    assert [t["id"] for t in shown] == [t["id"] for t in first["tracks"] + second["tracks"]]
    assert more == bool(second["next"])


def test_choosing_a_track_plays_its_recording_at_its_time_with_its_box_drawn(reviewed, tmp_path):
    from selenium.webdriver.common.by import By

    p, base = reviewed
    after, before = span(base)
    tracks = api(base, "api/store/tracks", after=after, before=before, limit=50,
                 **{"class": "person", "zone": ZONE})["tracks"]
    track = next((t for t in tracks if t["recording"] and t["snapshot"]), None)
    assert track, "a person in the zone with a recording and a snapshot"
    player = "const p = view.players[0], v = p && p.video;"
    d = browser(1320, 900)
    try:
        open_review(d, base, after=after, before=before, **{"class": "person", "zone": ZONE})
        item = d.find_element(By.CSS_SELECTOR, f'#track-list .track[data-id="{track["id"]}"]')
        thumb = wait_for(lambda: d.execute_script("return arguments[0].querySelector('img.thumb').naturalWidth",
                                                  item), 10)
        item.click()
        started = wait_for(lambda: d.execute_script(player + "return v && v.readyState >= 2 && !v.seeking && "
                                                    "!v.paused && v.currentTime"), 20)
        # paused back on the track's own picture (its best sighting: the track is in that row)
        d.execute_script(player + "v.pause(); v.currentTime = arguments[0]", track["recording_time"])
        wait_for(lambda: d.execute_script(player + "return !v.seeking"), 10)
        time.sleep(0.6)  # the picture shown has its boxes drawn
        state = d.execute_script(player + "return {src: v.currentSrc, t: v.currentTime, rect: "
                                 "v.getBoundingClientRect().toJSON(), w: v.videoWidth, h: v.videoHeight, "
                                 "shown: p.shown, drawn: p.drawn, error: v.error && v.error.code}")
        shot = screenshot(d)
    finally:
        d.quit()
    keep(shot, tmp_path, "review_track.png")
    assert thumb > 0, "the track's snapshot is its thumbnail"
    assert state["error"] is None and state["src"] == f"{base}/recordings/{track['recording']}"
    assert track["recording_time"] - 0.05 <= started < track["recording_time"] + 1.0, (started, track)
    frames = api(base, "api/boxes", recording=track["recording"], **{"from": state["t"] - 1, "to": state["t"] + 1})
    row = next(f for f in frames["frames"] if f["seq"] == state["shown"])
    assert abs(row["t"] - track["recording_time"]) < 0.02
    assert state["drawn"] == len(row["detections"])
    mine = next(x for x in row["detections"] if x["track"] == track["track"])
    r, k = state["rect"], min(state["rect"]["width"] / state["w"], state["rect"]["height"] / state["h"])
    left, top = r["x"] + (r["width"] - state["w"] * k) / 2, r["y"] + (r["height"] - state["h"] * k) / 2
    x1, y1, x2, y2 = mine["box"]
    b, g, red = class_color(mine["class_id"])
    assert outline_drawn(shot, (left + x1 * k, top + y1 * k, left + x2 * k, top + y2 * k), (red, g, b)) > 0.8


def test_a_moment_on_the_timeline_plays_every_camera_that_recorded_it(reviewed):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    p, base = reviewed
    after, before = span(base)
    segments = api(base, "api/store/segments", after=after, before=before, limit=10000)["segments"]
    moment = busiest_moment(segments)
    expected = {s["camera"]: s for s in segments if s["start"] <= moment < s["end"]}
    d = browser()
    try:
        open_review(d, base, after=after, before=before)
        timeline = d.find_element(By.ID, "timeline")
        dx = d.execute_script("const el = arguments[0], r = el.getBoundingClientRect();"
                              "return view.timelineX(arguments[1]) * r.width / el.clientWidth - r.width / 2",
                              timeline, moment)
        ActionChains(d).move_to_element_with_offset(timeline, round(dx), 0).click().perform()
        chosen = d.execute_script("return view.moment")
        read = lambda: d.execute_script(  # noqa: E731
            "const ps = view.players; return ps.length && ps.every((p) => p.video.readyState >= 2 && "
            "!p.video.seeking) && ps.map((p) => ({camera: p.video.dataset.camera, src: p.video.currentSrc, "
            "t: p.video.currentTime}))")
        # a segment still being written may not hold the moment yet when first served: its
        # player follows the growing file, so it is read again until it is there (or 30 s)
        players = wait_for(lambda: (ps := read()) and all(
            x["camera"] not in expected or x["t"] >= chosen - expected[x["camera"]]["start"] - 0.1 for x in ps) and ps,
            30) or read()
    finally:
        d.quit()
    assert len(expected) > 1, expected
    assert players and {x["camera"] for x in players} == set(expected)
    for x in players:
        s = expected[x["camera"]]
        assert x["src"] == f"{base}/recordings/{s['path']}"
        # each plays on from the moment while the others load: within a few seconds of it
        assert chosen - s["start"] - 0.1 <= x["t"] < chosen - s["start"] + 3.0, (x, s, chosen)
    assert abs(chosen - moment) < (before - after) / 200  # within a pixel or so


def test_a_drag_across_the_timeline_zooms_into_that_range(reviewed):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    p, base = reviewed
    after, before = span(base)
    a, b = after + (before - after) * 0.25, after + (before - after) * 0.5
    d = browser()
    try:
        open_review(d, base, after=after, before=before)
        timeline = d.find_element(By.ID, "timeline")
        x = d.execute_script("const el = arguments[0], r = el.getBoundingClientRect();"
                             "return arguments[1].map((t) => view.timelineX(t) * r.width / el.clientWidth - r.width / 2)",
                             timeline, [a, b])
        ActionChains(d).move_to_element_with_offset(timeline, round(x[0]), 0).click_and_hold() \
            .move_by_offset(round(x[1] - x[0]), 0).release().perform()
        zoomed = wait_for(lambda: d.execute_script("return view.after !== arguments[0] && "
                                                   "!document.getElementById('status').textContent.startsWith('loading')"
                                                   " && [view.after, view.before]", after), 20)
        address = d.execute_script("return Object.fromEntries(new URLSearchParams(location.search))")
    finally:
        d.quit()
    pixel = (before - after) / 1000  # the timeline is over 1000 px wide
    assert zoomed and abs(zoomed[0] - a) < 2 + pixel and abs(zoomed[1] - b) < 2 + pixel, (zoomed, a, b)  # whole seconds
    assert float(address["after"]) == zoomed[0] and float(address["before"]) == zoomed[1]


def chart_bars(d, chart: str) -> dict:
    return d.execute_script(f"""const el = document.getElementById('{chart}');
        return {{sum: [...el.querySelectorAll('rect.bar')].reduce((a, r) => a + Number(r.dataset.n), 0),
                 series: [...el.querySelectorAll('g.series')].map((g) => g.dataset.series)}}""")


def test_the_counts_charts_draw_the_stores_counts_per_hour_and_per_day(reviewed, tmp_path):
    from selenium.webdriver.common.by import By

    p, base = reviewed
    after, before = span(base)
    hour = api(base, "api/store/counts", bucket="hour", after=after, before=before, group="camera,name,direction")
    d = browser(1320, 1000)
    try:
        open_review(d, base, after=after, before=before)
        hourly, daily = chart_bars(d, "chart-hour"), chart_bars(d, "chart-day")
        d.execute_script("document.getElementById('counts').scrollIntoView()")
        shot = screenshot(d, d.find_element(By.ID, "counts"))
        open_review(d, base, after=after, before=before, view="counts")  # for a wall: the charts alone
        wall = d.execute_script("return [...document.querySelectorAll('section')].filter((s) => s.offsetParent)"
                                ".map((s) => s.id)")
        walled = chart_bars(d, "chart-hour")
    finally:
        d.quit()
    keep(shot, tmp_path, "review_counts.png")
    total = sum(n for s in hour["series"] for _, n in s["points"])
    assert total > 0 and hourly["sum"] == total == daily["sum"]  # one run: the same counts in either bucket
    assert len(hourly["series"]) == len(hour["series"])
    assert any(ZONE in name for name in hourly["series"])
    assert wall == ["counts"] and walled == hourly


def test_the_export_button_exports_the_chosen_camera_or_says_why_not(reviewed):
    p, base = reviewed
    after, before = span(base)
    day = (after - 43200, after + 43200)  # longer than an export may be
    status, body, _ = get(f"{base}/api/export?camera=campus&start={day[0]}&end={day[1]}",
                          {"Authorization": f"Bearer {TOKEN}"})
    assert status == 400
    refused = json.loads(body)["error"] if body.startswith(b"{") else body.decode().strip()
    d = browser()
    try:
        open_review(d, base, after=after + 2, before=after + 20, camera="campus")
        d.execute_script("document.getElementById('export').click()")
        done = wait_for(lambda: d.execute_script("const s = document.getElementById('status').textContent;"
                                                 "return s.startsWith('export') && !s.endsWith('…') && s"), 30)
        open_review(d, base, after=day[0], before=day[1], camera="campus")
        d.execute_script("document.getElementById('export').click()")
        said = wait_for(lambda: d.execute_script("const s = document.getElementById('status');"
                                                 "return s.classList.contains('error') && s.textContent"), 30)
    finally:
        d.quit()
    assert done and done.startswith("exported campus"), done
    assert said == f"export: {refused}"


def test_the_page_opens_on_the_day_with_a_row_of_activity_for_every_camera(reviewed, tmp_path):
    """The page as an operator opens it: today, a row per camera with its activity, the
    tracks; then every camera played at a moment of that day (a pixel of the day's
    timeline is over a minute: the moment is chosen as the timeline's click does, in code);
    the day after holds nothing, and says so."""
    from selenium.webdriver.common.by import By

    p, base = reviewed
    after, _ = span(base)
    d = browser(1320, 1180)
    try:
        d.get(f"{base}/review?token={TOKEN}")
        wait_for(lambda: d.execute_script("return document.querySelectorAll('#timeline g.row rect.objects').length"
                                          " && !document.getElementById('status').textContent.startsWith('loading')"),
                 30)
        state = d.execute_script("return {after: view.after, before: view.before, "
                                 "rows: [...document.querySelectorAll('#timeline g.row')].filter("
                                 "(g) => g.querySelector('rect.objects')).length}")
        segments = api(base, "api/store/segments", limit=10000)["segments"]
        moment = busiest_moment(segments)
        expected = {s["camera"] for s in segments if s["start"] <= moment < s["end"]}
        d.execute_script("playMoment(arguments[0])", moment)
        players = wait_for(lambda: d.execute_script("return view.players.every((p) => p.video.readyState >= 2 && "
                                                    "!p.video.seeking && p.frames.length > 0) && view.players.length"), 30)
        # each paused on its nearest picture with boxes (a camera with a stride has rows for every other one)
        picked = d.execute_script("""return view.players.map((p) => {
            const v = p.video, f = p.frames.filter((f) => f.detections.length)
              .reduce((a, b) => Math.abs(b.t - v.currentTime) < Math.abs(a.t - v.currentTime) ? b : a);
            v.pause(); v.currentTime = f.t; return [f.detections.length, f.seq]; })""")
        wanted, seqs = [n for n, _ in picked], [seq for _, seq in picked]
        # drawn once each player shows its picked row (`seeking` ends a task before `seeked` draws)
        drawn = wait_for(lambda: d.execute_script("return view.players.every((p, i) => !p.video.seeking && "
                                                  "p.shown === arguments[0][i]) && view.players.map((p) => p.drawn)",
                                                  seqs), 10)
        shot = screenshot(d)
        d.find_element(By.ID, "next-day").click()
        empty = wait_for(lambda: d.execute_script(
            "return view.after === arguments[0] && !document.getElementById('status').textContent.startsWith('loading')"
            " && [document.getElementById('timeline').textContent, document.getElementById('track-list').textContent,"
            " view.players.length]", state["before"]), 20)
    finally:
        d.quit()
    keep(shot, tmp_path, "review_day.png")
    assert empty and "nothing stored in this range" in empty[0] and empty[1] == "no track matches" and not empty[2]
    assert state["before"] - state["after"] in (23 * 3600, 24 * 3600, 25 * 3600)  # a local day
    assert state["after"] <= after < state["before"] and state["rows"] == len(CAMERAS)
    assert players == len(expected) > 1 and drawn == wanted


def test_a_run_without_a_store_says_so_once_on_the_review_page(model_path, sample_path, running):
    p = running({"sources": [{"id": "street", "uri": sample_path("bikes.mp4"), "stride": 5}],
                 "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
                 "outputs": {"video": {"enabled": False}, "store": False, "web": {"port": 0}}})
    assert p.wait(120), "the run did not end"
    base = f"http://127.0.0.1:{p.side.web.port}"
    status, body, _ = get(f"{base}/api/store/tracks")
    assert status == 404
    d = browser()
    try:
        d.get(f"{base}/review")
        said = wait_for(lambda: d.execute_script("const s = document.getElementById('status');"
                                                 "return s.classList.contains('error') && s.textContent"), 30)
    finally:
        d.quit()
    assert said == json.loads(body)["error"]
